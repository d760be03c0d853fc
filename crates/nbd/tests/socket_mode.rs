//! The unix socket's permissions are set explicitly, not left to the umask: 0660 by
//! default, any mode and group on request. (Its own test binary: it changes the process-wide
//! umask, which would race with files other tests create.)

mod common;

use common::*;
use raidkit_nbd::Listener;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

fn mode_of(path: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Sets the umask, returning the old one.
fn umask(mask: u32) -> u32 {
    // SAFETY: umask cannot fail; this test binary's one test creates its files itself.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

#[test]
fn socket_mode_and_group_do_not_depend_on_the_umask() {
    let dir = TempDir::new("sockmode");
    let old = umask(0o022);
    for mask in [0o000, 0o022, 0o077, 0o777] {
        umask(mask);
        let path = dir.path().join(format!("default-{mask:o}.sock"));
        let listener = Listener::bind_unix(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(mode_of(&path), 0o660, "umask {mask:o}");
        drop(listener);
        assert!(!path.exists(), "removed when dropped");

        let path = dir.path().join(format!("custom-{mask:o}.sock"));
        let _listener = Listener::bind_unix_with(&path, 0o600, None).unwrap();
        assert_eq!(mode_of(&path), 0o600, "umask {mask:o}");
    }
    umask(old);

    // A group: any as root, otherwise one of ours.
    // SAFETY: plain getters.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let gid = if euid == 0 { 4242 } else { egid };
    let path = dir.path().join("group.sock");
    let _listener = Listener::bind_unix_with(&path, 0o660, Some(gid)).unwrap();
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert_eq!(meta.gid(), gid);
    assert_eq!(meta.uid(), euid);
    assert_eq!(mode_of(&path), 0o660);
    // Bits beyond the permission bits are not set.
    let path = dir.path().join("sticky.sock");
    let _listener = Listener::bind_unix_with(&path, 0o7777, None).unwrap();
    assert_eq!(mode_of(&path), 0o777);

    // A server on a 0660 socket serves its owner.
    let server = Running::start(vec![(
        "disk",
        std::sync::Arc::new(raidkit_nbd::MemoryExport::new(1 << 20)) as _,
    )]);
    assert_eq!(mode_of(&server.socket), 0o660);
    let mut c = RawClient::connect(&server.socket);
    c.go("disk", false);
    c.request(0, 0, 1, 0, 512);
    assert_eq!(c.simple_reply(), (0, 1));
}
