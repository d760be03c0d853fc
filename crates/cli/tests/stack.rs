//! `raidkit create --level 50|60 --spans N` end to end: the stack is created on image files,
//! written, stopped, assembled again and read back exactly, whole and with members lost in
//! every span; bad splits are refused before anything is written; `detail` shows one array
//! with its spans; `serve` exports the stack as one NBD export; `add` rebuilds a lost member
//! into the span that misses it; check and repair scan every span; commands that act on one
//! array refuse a stack's members.

mod common;

use common::*;
use std::path::PathBuf;

/// Creates a RAID `level` stack of `count` 24 MiB image files in `spans` spans with a
/// 64 KiB chunk; returns the member paths.
fn create(dir: &TempDir, level: &str, count: usize, spans: usize) -> Vec<PathBuf> {
    let members = dir.members("m", count);
    let spans = spans.to_string();
    ok(&with(
        &[
            "create",
            "--level",
            level,
            "--spans",
            &spans,
            "--chunk",
            "64K",
            "--image-size",
            "24M",
        ],
        &members,
        &[],
    ));
    members
}

/// The array's size as `detail --json` reports it.
fn size_of(members: &[PathBuf]) -> usize {
    let out = ok(&with(&["detail", "--json"], members, &[]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["status"]["array_bytes"].as_u64().unwrap() as usize
}

/// Writes a pattern over the whole stack, then reads it back whole, after a stop, and with
/// `lost` members of every span left out (the span's first ones).
fn round_trip(level: &str, count: usize, spans: usize, lost: usize) {
    let dir = TempDir::new(&format!("stack{level}"));
    let members = create(&dir, level, count, spans);
    let size = size_of(&members);
    assert!(size > 0);
    let data = pattern(size, level.parse().unwrap());
    let input = dir.path("data");
    std::fs::write(&input, &data).unwrap();
    let out = ok(&with(&["write", "--input", s(&input)], &members, &[]));
    assert!(out.contains(&format!("wrote {size} bytes")), "{out}");
    ok(&with(&["stop"], &members, &[]));

    // Members in another order: each span is found by its array UUID.
    let mut shuffled = members.clone();
    shuffled.reverse();
    let back = dir.path("back");
    ok(&with(&["read", "--output", s(&back)], &shuffled, &[]));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "RAID {level} read back differs"
    );

    let per_span = count / spans;
    let kept: Vec<PathBuf> = members
        .iter()
        .enumerate()
        .filter(|(i, _)| i % per_span >= lost)
        .map(|(_, p)| p.clone())
        .collect();
    let degraded = dir.path("degraded");
    let out = raidkit(&with(&["read", "--output", s(&degraded)], &kept, &[]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    for span in 0..spans {
        assert!(
            err.contains(&format!("span {span} of the RAID {level} stack")),
            "{err}"
        );
    }
    assert!(
        std::fs::read(&degraded).unwrap() == data,
        "degraded RAID {level} read back differs"
    );
}

#[test]
fn raid50_of_six_in_two_spans_reads_back_whole_and_with_a_member_lost_per_span() {
    round_trip("50", 6, 2, 1);
}

#[test]
fn raid60_of_eight_in_two_spans_reads_back_whole_and_with_two_members_lost_per_span() {
    round_trip("60", 8, 2, 2);
}

#[test]
fn bad_splits_are_refused_and_nothing_is_created() {
    let dir = TempDir::new("stack-refusals");
    let cases: [(&str, usize, &str, &str); 5] = [
        ("50", 7, "2", "7 members do not split into 2 equal spans"),
        ("50", 4, "2", "a RAID 5 span needs at least 3"),
        ("60", 6, "2", "a RAID 6 span needs at least 4"),
        ("50", 6, "1", "at least 2 spans"),
        ("5", 6, "2", "--spans is for --level 50 and 60"),
    ];
    for (level, count, spans, why) in cases {
        let members = dir.members(&format!("r{level}-{count}-{spans}-"), count);
        let (code, err) = fails(&with(
            &[
                "create",
                "--level",
                level,
                "--spans",
                spans,
                "--image-size",
                "24M",
            ],
            &members,
            &[],
        ));
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(why), "{level}/{count}/{spans}: {err}");
    }
    let members = dir.members("nospans", 6);
    let (code, err) = fails(&with(
        &["create", "--level", "50", "--image-size", "24M"],
        &members,
        &[],
    ));
    assert_eq!(code, 2);
    assert!(err.contains("needs --spans"), "{err}");
    assert!(dir.listing().is_empty(), "{:?}", dir.listing());
}

#[test]
fn detail_shows_one_array_with_its_spans_and_single_array_commands_refuse() {
    let dir = TempDir::new("stack-detail");
    let members = create(&dir, "50", 6, 2);
    let out = ok(&with(&["detail"], &members, &[]));
    assert!(
        out.contains("Raid Level : raid50 (a RAID 0 over 2 RAID 5 spans)"),
        "{out}"
    );
    assert!(out.contains("Raid Devices : 6 (2 spans of 3)"), "{out}");
    assert!(out.contains("Span 0 : RAID 5 of 3 members"), "{out}");
    assert!(out.contains("Span 1 : RAID 5 of 3 members"), "{out}");
    for m in &members {
        assert!(out.contains(s(m)), "{out}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&with(&["detail", "--json"], &members, &[]))).unwrap();
    assert_eq!(json["status"]["stack"]["level"], 50);
    assert_eq!(
        json["status"]["stack"]["spans"].as_array().unwrap().len(),
        2
    );

    // A member lost: detail says which span is degraded.
    let out = ok(&with(&["detail"], &members[1..], &[]));
    assert!(out.contains("Span 0 : RAID 5 of 3 members"), "{out}");
    assert!(out.contains("(degraded)"), "{out}");

    // Commands that act on one array refuse the members of a stack.
    let (code, err) = fails(&with(&["fail", "--member", s(&members[0])], &members, &[]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("RAID 50 stack"), "{err}");

    let line = ok(&with(&["assemble"], &members, &[]));
    assert!(line.contains("raid50 over 2 spans"), "{line}");
}

#[test]
fn serve_exports_a_stack_as_one_nbd_export() {
    use raidkit_nbd::client::{connect, NbdUri};
    use raidkit_nbd::proto::{NBD_CMD_FLUSH, NBD_CMD_READ, NBD_CMD_WRITE};
    let dir = TempDir::new("stack-serve");
    let members = create(&dir, "60", 8, 2);
    let size = size_of(&members);
    let data = pattern(1 << 20, 60);
    let offset = (size - data.len()) as u64 / 2 / 4096 * 4096;
    {
        let mut server = Server::start(&dir.0, "nbd", &with(&[], &members, &[]));
        let uri = NbdUri::parse(&format!(
            "nbd+unix:///array?socket={}",
            server.socket.display()
        ))
        .unwrap();
        let (info, mut tx, mut rx) = connect(&uri).unwrap();
        assert_eq!(info.size_bytes, size as u64);
        for (i, piece) in data.chunks(64 << 10).enumerate() {
            let at = offset + (i as u64) * (64 << 10);
            tx.send(NBD_CMD_WRITE, i as u64, at, piece.len() as u32, Some(piece))
                .unwrap();
            assert_eq!(rx.reply().unwrap(), (i as u64, 0));
        }
        tx.send(NBD_CMD_FLUSH, 99, 0, 0, None).unwrap();
        assert_eq!(rx.reply().unwrap(), (99, 0));
        let mut back = vec![0u8; data.len()];
        tx.send(NBD_CMD_READ, 7, offset, back.len() as u32, None)
            .unwrap();
        assert_eq!(rx.reply().unwrap(), (7, 0));
        rx.payload(&mut back).unwrap();
        assert!(back == data, "read through NBD differs");
        let detail = ok(&["detail", "--control", s(&server.control)]);
        assert!(
            detail.contains("raid60 (a RAID 0 over 2 RAID 6 spans)"),
            "{detail}"
        );
        tx.disconnect();
        let (code, err) = server.stop();
        assert_eq!(code, Some(0), "{err}");
    }
    // Stopped clean, spans and all; the data is on the members.
    let line = ok(&with(&["assemble", "--read-only"], &members, &[]));
    assert!(!line.contains("not stopped cleanly"), "{line}");
    let back = dir.path("back");
    ok(&with(
        &[
            "read",
            "--offset",
            &offset.to_string(),
            "--length",
            &data.len().to_string(),
            "--output",
            s(&back),
        ],
        &members,
        &[],
    ));
    assert!(std::fs::read(&back).unwrap() == data);
}

#[test]
fn add_rebuilds_into_the_span_that_misses_a_member_and_check_scans_every_span() {
    let dir = TempDir::new("stack-add");
    let members = create(&dir, "50", 6, 2);
    let size = size_of(&members);
    let data = pattern(size, 5);
    let input = dir.path("data");
    std::fs::write(&input, &data).unwrap();
    ok(&with(&["write", "--input", s(&input)], &members, &[]));

    // Span 1 loses its middle member (m4): the rest start degraded (--run records it
    // faulty), and a new member is rebuilt into span 1.
    let mut rest: Vec<PathBuf> = members.clone();
    rest.remove(4);
    let new = dir.path("new4.img");
    let out = ok(&with(
        &["add", "--run", "--member", s(&new), "--image-size", "24M"],
        &rest,
        &[],
    ));
    assert!(out.contains("span 1 misses a member"), "{out}");
    let mut now = rest.clone();
    now.push(new.clone());
    let json: serde_json::Value =
        serde_json::from_str(&ok(&with(&["detail", "--json"], &now, &[]))).unwrap();
    assert_eq!(json["status"]["degraded"], false, "{json}");
    // The rebuilt member alone carries span 1 with m3 (m5 left out): the data is whole.
    let mut without_m5 = now.clone();
    without_m5.retain(|p| p != &members[5]);
    let back = dir.path("back");
    ok(&with(&["read", "--output", s(&back)], &without_m5, &[]));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "read back after the rebuild differs"
    );

    // Nothing missing: add refuses and writes nothing.
    let before = contents(&now);
    let (code, err) = fails(&with(
        &[
            "add",
            "--member",
            s(&dir.path("extra.img")),
            "--image-size",
            "24M",
        ],
        &now,
        &[],
    ));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("no span of the RAID 50 stack misses a member"),
        "{err}"
    );
    assert_unchanged(&now, &before, "a refused add");

    // check scans both spans and finds nothing; a member's data corrupted in span 0 is
    // found by check (exit 5) and fixed by repair.
    ok(&with(&["check"], &now, &[]));
    let m1 = raidkit_disk::FileDisk::open(
        &members[1],
        raidkit_disk::OpenOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let sb = raidkit_engine::read_superblock(&m1).unwrap();
    drop(m1);
    let at = sb.sb.data_offset_sectors * 512 + (1 << 20);
    let mut img = std::fs::read(&members[1]).unwrap();
    for b in &mut img[at as usize..at as usize + 4096] {
        *b ^= 0x5a;
    }
    std::fs::write(&members[1], &img).unwrap();
    let (code, err) = exit_code(&with(&["check"], &now, &[]));
    assert_eq!(code, 5, "{err}");
    ok(&with(&["repair"], &now, &[]));
    ok(&with(&["check"], &now, &[]));
}

#[test]
fn serve_logs_what_happens_in_a_span_under_the_span_s_name() {
    let dir = TempDir::new("stack-serve-log");
    let members = create(&dir, "50", 6, 2);
    // Span 1 starts without its last member.
    let mut server = Server::start(&dir.0, "nbd", &with(&["--run"], &members[..5], &[]));
    std::thread::sleep(std::time::Duration::from_millis(600));
    let (code, err) = server.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("array/span1: running degraded: slots [2] missing"),
        "{err}"
    );
    assert!(!err.contains("array/span0: running degraded"), "{err}");
}

#[test]
fn scan_prints_a_stack_as_one_array_and_assemble_scan_finds_its_members_by_its_uuid() {
    let dir = TempDir::new("stack-scan");
    let members = create(&dir, "50", 6, 2);
    let glob = format!("{}/*.img", dir.0.display());
    let out = ok(&["scan", &glob]);
    assert_eq!(out.matches("ARRAY").count(), 1, "{out}");
    assert!(
        out.contains("level=raid50") && out.contains("num-devices=6"),
        "{out}"
    );
    let want: Vec<&str> = members.iter().map(|p| s(p)).collect();
    assert!(
        out.contains(&format!("devices={}", want.join(","))),
        "{out}"
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&["scan", "--json", &glob])).unwrap();
    let uuid = json[0]["uuid"].as_str().unwrap().to_string();
    let detail: serde_json::Value =
        serde_json::from_str(&ok(&with(&["detail", "--json"], &members, &[]))).unwrap();
    assert_eq!(detail["status"]["uuid"].as_str(), Some(uuid.as_str()));

    // An ARRAY line with the stack's UUID alone: its members are found among the candidates.
    let config = dir.path("raidkit.conf");
    std::fs::write(&config, format!("DEVICE {glob}\nARRAY r50 UUID={uuid}\n")).unwrap();
    let out = ok(&["assemble", "--scan", "--config", s(&config)]);
    assert!(out.contains("r50: raid50 over 2 spans"), "{out}");
}

#[test]
fn a_served_stack_fails_removes_and_rebuilds_a_member_through_its_span() {
    let dir = TempDir::new("stack-served-members");
    let members = create(&dir, "50", 6, 2);
    let size = size_of(&members);
    let data = pattern(size, 50);
    let input = dir.path("data");
    std::fs::write(&input, &data).unwrap();
    ok(&with(&["write", "--input", s(&input)], &members, &[]));
    let new = dir.path("new.img");
    {
        let mut server = Server::start(&dir.0, "nbd", &with(&[], &members, &[]));
        let ctl = s(&server.control).to_string();
        ok(&["fail", "--control", &ctl, "--member", s(&members[4])]);
        let detail = ok(&["detail", "--control", &ctl]);
        assert!(detail.contains("Span 1 : RAID 5 of 3 members"), "{detail}");
        assert!(
            detail.contains("State : active, degraded") || detail.contains("degraded"),
            "{detail}"
        );
        ok(&["remove", "--control", &ctl, "--member", s(&members[4])]);
        let (code, err) = fails(&["fail", "--control", &ctl, "--member", s(&new)]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("not a member of any span"), "{err}");
        ok(&[
            "add",
            "--control",
            &ctl,
            "--member",
            s(&new),
            "--size",
            "24M",
            "--wait",
        ]);
        let json: serde_json::Value =
            serde_json::from_str(&ok(&["detail", "--control", &ctl, "--json"])).unwrap();
        assert_eq!(json["status"]["degraded"], false, "{json}");
        let (code, err) = fails(&[
            "add",
            "--control",
            &ctl,
            "--member",
            s(&dir.path("extra.img")),
            "--size",
            "24M",
        ]);
        assert_eq!(code, 3, "{err}");
        assert!(err.contains("no span of the RAID 50 stack"), "{err}");
        let (code, err) = server.stop();
        assert_eq!(code, Some(0), "{err}");
    }
    // The rebuilt member carries span 1 with m3 (m5 left out).
    let mut now: Vec<PathBuf> = members[..4].to_vec();
    now.push(new);
    let back = dir.path("back");
    ok(&with(&["read", "--output", s(&back)], &now, &[]));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "read back after the rebuild differs"
    );
}

/// `serve --spare` offers its global spares to a stack's spans: a member of span 0 fails, the
/// spare joins span 0 and is rebuilt there, and the stack reads back whole without the
/// failed member.
#[test]
fn a_global_spare_goes_to_the_span_that_lost_a_member() {
    let dir = TempDir::new("stack-spare");
    let members = create(&dir, "50", 6, 2);
    let size = size_of(&members);
    let data = pattern(size, 51);
    let input = dir.path("data");
    std::fs::write(&input, &data).unwrap();
    ok(&with(&["write", "--input", s(&input)], &members, &[]));
    ok(&with(&["stop"], &members, &[]));
    let spare = dir.path("spare.img");
    let mut server = Server::start(
        &dir.0,
        "nbd",
        &with(
            &["--spare", s(&spare), "--spare-size", "24M"],
            &members,
            &[],
        ),
    );
    ok(&[
        "fail",
        "--control",
        s(&server.control),
        "--member",
        s(&members[1]),
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let d = ok(&["detail", "--control", s(&server.control)]);
        let span0 = d.split("Span 1").next().unwrap_or_default().to_string();
        if span0.contains("(whole)")
            && span0
                .lines()
                .any(|l| l.contains("active") && l.contains("spare.img"))
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never rebuilt: {d}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (code, err) = server.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("array/span0: global spare") && err.contains("taken"),
        "{err}"
    );
    // Without the failed member, the spare in its place.
    let mut now: Vec<PathBuf> = members.clone();
    now[1] = spare;
    let back = dir.path("back");
    let out = raidkit(&with(&["read", "--output", s(&back)], &now, &[]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read(&back).unwrap() == data, "read back differs");
}
