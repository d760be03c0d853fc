//! SIGINT/SIGTERM as a shutdown flag for [`crate::serve`].
//!
//! The handler only stores into a static atomic (async-signal-safe); the server's accept loop
//! polls the flag every 100 ms and then shuts down cleanly.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

static SHUTDOWN_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    SHUTDOWN_REQUESTED.store(true, Ordering::SeqCst);
}

/// Installs handlers for SIGINT and SIGTERM that set the returned flag.
pub fn shutdown_on_signals() -> io::Result<&'static AtomicBool> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: sigaction is plain data; the handler only touches an atomic, which is
        // async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(&SHUTDOWN_REQUESTED)
}
