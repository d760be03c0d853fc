//! SIGINT and SIGTERM set the shutdown flag instead of killing the process, and a server
//! watching that flag shuts down cleanly. (Its own test binary: it installs process-wide
//! signal handlers.)

mod common;

use common::*;
use raidkit_nbd::{Listener, MemoryExport, Server};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn sigterm_stops_the_server_cleanly() {
    let flag = raidkit_nbd::shutdown_on_signals().unwrap();
    assert!(!flag.load(Ordering::SeqCst));
    let dir = TempDir::new("signals");
    let socket = dir.path().join("nbd.sock");
    let listener = Listener::bind_unix(&socket).unwrap();
    let server = Server::builder()
        .export("disk", Arc::new(MemoryExport::new(1 << 20)))
        .build()
        .unwrap();
    let thread = std::thread::spawn(move || server.serve(&listener, flag).unwrap());
    let mut client = RawClient::connect(&socket);
    client.go("disk", false);

    // SAFETY: raising a signal whose handler was installed above only sets the flag.
    unsafe { libc::raise(libc::SIGTERM) };
    assert!(flag.load(Ordering::SeqCst));
    let start = Instant::now();
    let report = thread.join().unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(report.all_flushed());
    assert_eq!(report.connections_accepted, 1);
    assert!(client.closed_by_server(), "open connections are closed");
    assert!(!socket.exists(), "the unix socket is removed");

    // A second signal (an impatient operator) sets the flag again and kills nothing: this
    // process is still here to see it, and asking again gives the same flag.
    // SAFETY: as above.
    unsafe { libc::raise(libc::SIGINT) };
    unsafe { libc::raise(libc::SIGTERM) };
    assert!(flag.load(Ordering::SeqCst));
    let again = raidkit_nbd::shutdown_on_signals().unwrap();
    assert!(std::ptr::eq(again, flag));
}
