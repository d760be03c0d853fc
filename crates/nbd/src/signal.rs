//! SIGINT/SIGTERM as a shutdown flag for [`crate::serve`].
//!
//! Owns the process's SIGINT and SIGTERM handlers and the one flag they set. The handlers come
//! from `signal-hook` (its `flag` module: the handler only stores into an atomic, which is
//! async-signal-safe, and the crate chains with handlers others installed and restarts
//! interrupted system calls); the server's accept loop polls the flag every 100 ms and then
//! shuts down cleanly. A second signal sets the flag again and does nothing else: the process
//! is never killed by it, so a shutdown already under way (flushing, marking arrays clean)
//! always completes.

use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock, Mutex};

/// The flag every handler sets; one for the process, as the handlers are.
static SHUTDOWN_REQUESTED: LazyLock<Arc<AtomicBool>> =
    LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// Whether the handlers are registered: signal-hook adds one more action per registration, so
/// they are registered once however often this is called.
static REGISTERED: Mutex<bool> = Mutex::new(false);

/// Installs handlers for SIGINT and SIGTERM that set the returned flag. Calling it again
/// returns the same flag.
pub fn shutdown_on_signals() -> io::Result<&'static AtomicBool> {
    // The guarded bool is only set after both registrations succeeded: a panic elsewhere
    // cannot leave it wrong.
    let mut registered = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if !*registered {
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, Arc::clone(&SHUTDOWN_REQUESTED))?;
        }
        *registered = true;
    }
    Ok(&SHUTDOWN_REQUESTED)
}
