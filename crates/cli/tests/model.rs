//! `raidkit model`, `raidkit model validate` and `raidkit plan` through the real binary:
//! predictions from flags and from a TOML file, the studies' table, the planner's choice,
//! and the refusals.

mod common;

use common::*;
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}\n{out}"))
}

fn mb_s(v: &Value) -> f64 {
    v["mb_s"].as_f64().unwrap()
}

/// Several levels and counts: one prediction each, with the figures the issue names, and
/// the orders the physics gives (RAID 0 reads faster than RAID 5 of the same drives, the
/// inner zone slower than the outer, RAID 6 safer than RAID 5).
#[test]
fn model_predicts_each_level_and_count() {
    let v = json(&[
        "model",
        "--drive",
        "hds7k3000",
        "--drives",
        "4,6",
        "--level",
        "0,5,6",
        "--workload",
        "db-oltp",
        "--qd",
        "16",
        "--json",
    ]);
    assert_eq!(v["schema"], "raidkit-model/1");
    let ps = v["predictions"].as_array().unwrap();
    assert_eq!(ps.len(), 6, "3 levels x 2 counts");
    let find = |level: &str, n: u64| {
        ps.iter()
            .find(|p| p["level"] == level && p["drives"] == n)
            .unwrap_or_else(|| panic!("{level} x{n}"))
    };
    let (r0, r5, r6) = (find("RAID 0", 6), find("RAID 5", 6), find("RAID 6", 6));
    assert!(mb_s(&r0["seq_read_outer"]) > mb_s(&r5["seq_read_outer"]));
    assert!(mb_s(&r5["seq_read_inner"]) < mb_s(&r5["seq_read_outer"]) * 0.7);
    let loss = |p: &Value| p["reliability"]["annual_loss"].as_f64().unwrap();
    assert!(loss(r6) < loss(r5) && loss(r5) < loss(r0));
    // db-oltp: a limit named, degraded figures for the levels that survive a failure.
    let w = &r5["workloads"][0];
    assert_eq!(w["what"], "db-oltp");
    assert!(w["iops"].as_f64().unwrap() > 100.0);
    assert!(!w["limit"].as_str().unwrap().is_empty());
    assert!(r5["degraded_workloads"][0]["iops"].as_f64().unwrap() < w["iops"].as_f64().unwrap());
    assert!(r0["degraded_seq_read"].is_null());
    assert!(
        find("RAID 5", 4)["capacity_bytes"].as_u64().unwrap()
            < r5["capacity_bytes"].as_u64().unwrap()
    );
}

/// A TOML file says the same as the flags; a flag given wins over the file.
#[test]
fn model_takes_a_toml_file() {
    let dir = TempDir::new("model-toml");
    let f = dir.path("m.toml");
    std::fs::write(
        &f,
        "drive = \"cheetah15k5\"\ndrives = [8]\nlevels = [\"10\"]\ncontroller = \"perc6\"\nraid_in = \"controller\"\nworkload = \"exchange-email\"\nqd = 32\nfleet = 50\n",
    )
    .unwrap();
    let v = json(&["model", "--config", s(&f), "--json"]);
    let p = &v["predictions"][0];
    assert_eq!(p["level"], "RAID 10 n2");
    assert_eq!(p["drives"], 8);
    assert!(p["system"].as_str().unwrap().contains("perc6"));
    assert_eq!(p["workloads"][0]["what"], "exchange-email");
    assert_eq!(p["reliability"]["fleet"], 50);
    let v = json(&["model", "--config", s(&f), "--drives", "4", "--json"]);
    assert_eq!(v["predictions"][0]["drives"], 4);
    // An unknown key is refused, naming it.
    std::fs::write(&f, "drive = \"cheetah15k5\"\nspindles = 3\n").unwrap();
    let (code, err) = fails(&["model", "--config", s(&f)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("spindles"), "{err}");
}

#[test]
fn model_refuses_what_it_cannot_model() {
    for (args, says) in [
        (vec!["model", "--drive", "nosuch"], "no drive"),
        (vec!["model", "--level", "7"], "level"),
        (vec!["model", "--level", "6", "--drives", "3"], "fit"),
        (
            vec![
                "model",
                "--controller",
                "3ware-5400",
                "--drives",
                "6",
                "--level",
                "5",
            ],
            "bays",
        ),
        (vec!["model", "--workload", "nosuch"], "IOmeter"),
        (vec!["model", "--method", "guess"], "analytic"),
        (vec!["model", "--cache-policy", "wb-ra"], "controller"),
        (
            vec![
                "model",
                "--controller",
                "3ware-5400",
                "--drives",
                "4",
                "--cache-policy",
                "wb-ra",
            ],
            "cache",
        ),
    ] {
        let (code, err) = fails(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// The validation table: every cell of the studies, the analytic method's bar met.
#[test]
fn validate_prints_every_cell_and_meets_the_bar() {
    let v = json(&["model", "validate", "--json"]);
    assert_eq!(v["schema"], "raidkit-model-validate/1");
    let cells = v["cells"].as_array().unwrap();
    assert!(cells.len() >= 50);
    assert!(v["analytic"]["median_abs_error"].as_f64().unwrap() <= 0.10);
    assert_eq!(v["analytic"]["beyond_30pct_unexplained"], 0);
    let text = ok(&["model", "validate"]);
    assert!(text.contains("median absolute error"), "{text}");
    assert!(text.contains("RAID1E x6 write"), "{text}");
}

/// The planner: six 2 TB drives for video editing under capacity and risk constraints;
/// the choice meets them and says why in one sentence; a constraint nothing meets is said.
#[test]
fn plan_ranks_and_explains_its_choice() {
    let v = json(&[
        "plan",
        "--drive",
        "hds7k3000",
        "--drives",
        "6",
        "--workload",
        "video-editing",
        "--min-capacity",
        "6T",
        "--max-annual-loss",
        "1e-4",
        "--json",
    ]);
    assert_eq!(v["schema"], "raidkit-plan/1");
    let ranked = v["ranked"].as_array().unwrap();
    let first = &ranked[0];
    assert_eq!(first["meets"], true);
    let p = &first["prediction"];
    assert!(p["capacity_bytes"].as_u64().unwrap() >= 6_000_000_000_000);
    assert!(p["reliability"]["annual_loss"].as_f64().unwrap() <= 1e-4);
    // Ranked by speed among those that meet every constraint.
    let speed = |c: &Value| c["prediction"]["workloads"][0]["mb_s"].as_f64().unwrap();
    for c in ranked.iter().filter(|c| c["meets"] == true) {
        assert!(speed(c) <= speed(first));
    }
    let raid0 = ranked
        .iter()
        .find(|c| c["prediction"]["level"] == "RAID 0")
        .unwrap();
    assert_eq!(raid0["meets"], false);
    assert!(v["reason"]
        .as_str()
        .unwrap()
        .contains(p["level"].as_str().unwrap()));
    let out = ok(&[
        "plan",
        "--drive",
        "hds7k3000",
        "--drives",
        "6",
        "--min-capacity",
        "100T",
    ]);
    assert!(
        out.contains("no configuration meets every constraint"),
        "{out}"
    );
}
