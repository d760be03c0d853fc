//! Members of a served array changed through its control socket: a member copied onto a new
//! one while the array stays whole (`replace --control`), a failed and removed member coming
//! back by re-add (`add --control`), and a device of another array refused, untouched. The
//! data a real NBD client wrote reads back whole, and the stopped members check clean.

mod common;

use common::*;
use serde_json::Value;
use std::process::Command;

fn nbd(socket: &std::path::Path) -> String {
    format!("nbd+unix:///md0?socket={}", socket.display())
}

fn detail(ctl: &str) -> Value {
    serde_json::from_str(&ok(&["detail", "--control", ctl, "--json"])).unwrap()
}

fn role_of(v: &Value, name: &str) -> Option<String> {
    v["status"]["members"]
        .as_array()?
        .iter()
        .find(|m| m["name"].as_str() == Some(name))
        .and_then(|m| m["role"].as_str().map(str::to_string))
}

#[test]
fn replace_and_re_add_on_a_served_array() {
    let dir = TempDir::new("served-members");
    let members = dir.members("m", 4);
    ok(&with(
        &[
            "create",
            "--level",
            "5",
            "--bitmap",
            "internal",
            "--image-size",
            "32M",
        ],
        &members,
        &[],
    ));
    let mut args = vec!["--name", "md0"];
    args.extend(members.iter().map(|p| s(p)));
    let mut server = Server::start(&dir.0, "nbd", &args);
    let ctl = s(&server.control).to_string();
    let data = pattern(24 << 20, 5);
    let input = dir.path("data.bin");
    std::fs::write(&input, &data).unwrap();
    let uri = nbd(&server.socket);
    let copy = |from: &str, to: &str| {
        assert!(Command::new("nbdcopy")
            .args([from, to])
            .status()
            .expect("nbdcopy (libnbd-bin) runs")
            .success());
    };
    copy(s(&input), &uri);

    // Replace member 1 by a new image while the array serves.
    let new = dir.path("new.img");
    let out = ok(&[
        "replace",
        "--control",
        &ctl,
        "--member",
        s(&members[1]),
        "--with",
        s(&new),
        "--size",
        "32M",
        "--wait",
    ]);
    assert!(out.contains("holds its slot now"), "{out}");
    let v = detail(&ctl);
    assert_eq!(role_of(&v, s(&new)).as_deref(), Some("active"), "{v}");
    assert_eq!(
        role_of(&v, s(&members[1])).as_deref(),
        Some("faulty"),
        "{v}"
    );
    ok(&["remove", "--control", &ctl, "--member", s(&members[1])]);

    // Member 2 fails and is removed; the client writes on; it comes back by re-add.
    ok(&["fail", "--control", &ctl, "--member", s(&members[2])]);
    ok(&["remove", "--control", &ctl, "--member", s(&members[2])]);
    copy(s(&input), &uri);
    let v: Value = serde_json::from_str(&ok(&[
        "add",
        "--control",
        &ctl,
        "--member",
        s(&members[2]),
        "--wait",
        "--json",
    ]))
    .unwrap();
    assert_eq!(v["re_added_slot"], Value::from(2), "{v}");
    assert_eq!(
        role_of(&v, s(&members[2])).as_deref(),
        Some("active"),
        "{v}"
    );

    // A member of another array is refused, as an added member and as a replacement, and
    // left as it was.
    let other = dir.members("o", 2);
    ok(&with(
        &["create", "--level", "1", "--image-size", "32M"],
        &other,
        &[],
    ));
    let before = contents(&other[..1]);
    let (code, err) = fails(&["add", "--control", &ctl, "--member", s(&other[0])]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("another array"), "{err}");
    assert_unchanged(&other[..1], &before, "the other array's member");
    let (code, err) = fails(&[
        "replace",
        "--control",
        &ctl,
        "--member",
        s(&members[0]),
        "--with",
        s(&other[0]),
    ]);
    assert_eq!(code, 3, "{err}");
    assert_unchanged(&other[..1], &before, "the other array's member");

    // The client's data reads back whole; stopped, the members check clean.
    let back = dir.path("back.bin");
    copy(&uri, s(&back));
    assert!(std::fs::read(&back).unwrap()[..data.len()] == data[..]);
    server.stop();
    let now = [
        members[0].clone(),
        new.clone(),
        members[2].clone(),
        members[3].clone(),
    ];
    let (code, err) = exit_code(&with(&["check"], &now, &[]));
    assert_eq!(code, 0, "{err}");
}
