//! The control socket of `raidkit serve`: served arrays are managed with the same commands that
//! act on stopped arrays, given `--control PATH` instead of member files
//! (`raidkit detail|fail|remove|add --control PATH [--array NAME] …`).
//!
//! Protocol: one JSON object per line in each direction over a unix stream socket; any number
//! of requests per connection, answered in order.
//!
//! ```text
//! {"op":"list"}
//! {"op":"detail","array":"md0"}                       ("array" may be left out when one is served)
//! {"op":"fail","array":"md0","member":"/abs/m2.img"}
//! {"op":"remove","array":"md0","member":"/abs/m2.img"}
//! {"op":"add","array":"md0","path":"/abs/new.img","size_bytes":67108864}
//! -> {"ok":true,"result":{…}}  or  {"ok":false,"code":N,"error":"…"}
//! ```
//!
//! `code` is one of the exit codes documented in `raidkit --help`; the client exits with it.
//! Members are named by path; the server compares canonical paths, so `./m2.img` and its
//! absolute form name the same member.
//!
//! Invariants, and why:
//! - Only the owner gets in: the socket is created mode 0600 (under a umask, so there is no
//!   moment when it is open to others) and each connection's peer uid (`SO_PEERCRED`) must be
//!   the server's effective uid; root included, nobody else may steer the arrays.
//! - A client cannot hurt the server or the arrays: a request is parsed into a closed set of
//!   typed values (unknown operations and fields are refused) before an array is touched; a
//!   line is at most [`MAX_LINE_BYTES`] (a longer one gets an error reply and the connection is
//!   closed); an idle connection is closed after [`IDLE_TIMEOUT`]; at most
//!   [`MAX_CONNECTIONS`] are served at once; a panic while handling a request is contained to
//!   its connection.
//! - Shutdown stops accepting, closes idle connections, and waits for requests in progress (an
//!   `add` may be rebuilding onto the new member) before returning, so the caller never stops
//!   an array while its membership is changing.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use raidkit_engine::{Status, TaskKind};
use serde::{Deserialize, Serialize};

use super::export::{Backend, ServedArray};
use super::log::ServerLog;
use super::spares::GlobalSpares;
use crate::common::{add_or_re_add, engine_error, open_or_create, random_uuid};
use crate::error::{CliError, ExitCode};
use crate::view::{print_detail, StatusView};

/// Longest request or reply line accepted, newline included.
pub const MAX_LINE_BYTES: usize = 64 << 10;
/// Replies can carry a whole status with many members; the client allows more than requests.
const MAX_REPLY_BYTES: usize = 16 << 20;
/// A connection that sends nothing for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest an `events` request waits for an event.
pub const MAX_EVENTS_WAIT_MS: u64 = 10_000;

/// Control connections served at once; more get an error reply and are closed.
pub const MAX_CONNECTIONS: usize = 16;

/// One request on the control socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// The served arrays, by export name.
    List,
    /// The array's status (what `raidkit detail --json` prints for a stopped array).
    Detail {
        #[serde(default)]
        array: Option<String>,
    },
    /// Mark an active member faulty.
    Fail {
        #[serde(default)]
        array: Option<String>,
        member: String,
    },
    /// Detach a faulty or spare member.
    Remove {
        #[serde(default)]
        array: Option<String>,
        member: String,
    },
    /// The array's events numbered `since` and later (all of them from the oldest kept when
    /// `since` is 0; none, only the next number, when it is missing), waiting up to `wait_ms`
    /// (at most 10 s) for one when there is none yet: what `raidkit monitor` reads.
    Events {
        #[serde(default)]
        array: Option<String>,
        #[serde(default)]
        since: Option<u64>,
        #[serde(default)]
        wait_ms: Option<u64>,
    },
    /// Start background work on the served array: check, repair, patrol, rebuild or resync
    /// (md's `sync_action`); it runs beside the clients at the array's task rates.
    StartTask {
        #[serde(default)]
        array: Option<String>,
        task: String,
    },
    /// Stop the running task at its next step (its checkpoint recorded).
    StopTask {
        #[serde(default)]
        array: Option<String>,
    },
    /// Change the task rates: each task's share of the array's time while clients use it,
    /// in percent (a hardware controller's rates), and a cap in bytes per second (md's
    /// speed_limit_max; 0 removes it). Rates not given stay.
    Rates {
        #[serde(default)]
        array: Option<String>,
        #[serde(default)]
        rebuild_percent: Option<u8>,
        #[serde(default)]
        resync_percent: Option<u8>,
        #[serde(default)]
        check_percent: Option<u8>,
        #[serde(default)]
        patrol_percent: Option<u8>,
        #[serde(default)]
        reshape_percent: Option<u8>,
        #[serde(default)]
        max_bytes_per_s: Option<u64>,
        #[serde(default)]
        min_bytes_per_s: Option<u64>,
    },
    /// Set the read policy: none, always or adaptive (the PERC6's NORA, RA, ARA).
    ReadAhead {
        #[serde(default)]
        array: Option<String>,
        policy: raidkit_engine::ReadAhead,
    },
    /// Set the write policy: through or back (the PERC6's WT, WB; md's journal_mode).
    WritePolicy {
        #[serde(default)]
        array: Option<String>,
        policy: raidkit_engine::WritePolicy,
    },
    /// Reshape the served array while it serves (mdadm --grow's --raid-devices, --level,
    /// --layout, --chunk): the spares it needs are added first (`add`); progress is in
    /// `detail`'s `reshape`.
    Grow {
        #[serde(default)]
        array: Option<String>,
        #[serde(default)]
        raid_devices: Option<usize>,
        #[serde(default)]
        level: Option<i32>,
        #[serde(default)]
        layout: Option<u32>,
        #[serde(default)]
        chunk_sectors: Option<u64>,
        /// The array's size from now on (mdadm's `--array-size`), which a shrink needs.
        #[serde(default)]
        array_sectors: Option<u64>,
    },
    /// Add an image file (created with `size_bytes` when missing) or block device as a spare;
    /// a missing slot is rebuilt onto it.
    Add {
        #[serde(default)]
        array: Option<String>,
        path: String,
        #[serde(default)]
        size_bytes: Option<u64>,
        /// Add a device holding another array's superblock, or a former member that cannot
        /// be re-added, as a new spare (mdadm --force); a former member of this array is
        /// re-added without it.
        #[serde(default)]
        force: bool,
    },
    /// Copy an active member onto a new one while the array stays whole (mdadm --replace):
    /// `with` (an image file created with `size_bytes` when missing, or a block device)
    /// becomes the slot's replacement, is filled in the background, then takes the slot.
    Replace {
        #[serde(default)]
        array: Option<String>,
        member: String,
        with: String,
        #[serde(default)]
        size_bytes: Option<u64>,
    },
}

/// One reply line.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Reply {
    fn success(result: serde_json::Value) -> Reply {
        Reply {
            ok: true,
            result: Some(result),
            code: None,
            error: None,
        }
    }

    fn failure(err: &CliError) -> Reply {
        Reply {
            ok: false,
            result: None,
            code: Some(err.code as u8),
            error: Some(err.message.clone()),
        }
    }

    fn to_line(&self) -> Vec<u8> {
        // Serialising plain values and a `Status` cannot fail; if it ever did, the client
        // still gets a well-formed error line.
        let mut line = serde_json::to_vec(self).unwrap_or_else(|e| {
            format!(r#"{{"ok":false,"code":1,"error":"cannot encode the reply: {e}"}}"#)
                .into_bytes()
        });
        line.push(b'\n');
        line
    }
}

// ---------------------------------------------------------------------------------------------
// Server

/// The bound control socket; the socket file is removed when this is dropped.
pub struct ControlListener {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlListener {
    /// Binds `path` with mode 0600. A stale socket left by a dead server is replaced; a live
    /// one (something answers) is `AddrInUse`; anything else at the path is left alone and
    /// binding fails.
    pub fn bind(path: &Path) -> io::Result<ControlListener> {
        use std::os::unix::fs::FileTypeExt;
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if meta.file_type().is_socket() {
                if UnixStream::connect(path).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("{} is in use by a running server", path.display()),
                    ));
                }
                std::fs::remove_file(path)?;
            }
        }
        // The umask makes bind create the socket 0600 in one step. It is process-wide, but it
        // is only changed for the duration of one bind, and no other thread creates files
        // while `raidkit serve` starts up.
        // SAFETY: umask has no memory effects.
        let old = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(path);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let listener = bound?;
        let control = ControlListener {
            listener,
            path: path.to_path_buf(),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        control.listener.set_nonblocking(true)?;
        Ok(control)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What the control server did, for the closing message.
#[derive(Debug, Default)]
pub struct ControlReport {
    pub connections: u64,
    /// Refused: wrong peer uid or too many connections.
    pub refused: u64,
    pub requests: u64,
}

/// Serves the control socket for `arrays`.
pub struct ControlServer {
    arrays: Vec<ServedArray>,
    spares: Arc<GlobalSpares>,
    log: Arc<ServerLog>,
}

/// The uid of the process at the other end of a unix socket.
fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    // SAFETY: ucred is plain data; getsockopt fills at most `len` bytes of it.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid fd, pointer and length for SO_PEERCRED.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

fn poll_readable(fd: i32, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc > 0)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The registry of open connections stays valid if a holder panicked.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ControlServer {
    pub fn new(arrays: Vec<ServedArray>) -> ControlServer {
        ControlServer {
            arrays,
            spares: Arc::default(),
            log: Arc::default(),
        }
    }

    /// The server's log (what an online reshape says goes there).
    pub fn with_log(mut self, log: Arc<ServerLog>) -> ControlServer {
        self.log = log;
        self
    }

    /// The global spare pool `list` reports and `add` keeps clear of.
    pub fn with_spares(mut self, spares: Arc<GlobalSpares>) -> ControlServer {
        self.spares = spares;
        self
    }

    /// Accepts and serves control connections until `shutdown` is set; then closes idle
    /// connections and waits for requests in progress. Returns what it did.
    pub fn serve(&self, listener: &ControlListener, shutdown: &AtomicBool) -> ControlReport {
        // SAFETY: geteuid has no memory effects.
        let owner = unsafe { libc::geteuid() };
        let open: Mutex<HashMap<u64, UnixStream>> = Mutex::new(HashMap::new());
        let active = AtomicUsize::new(0);
        let requests = AtomicU64::new(0);
        let mut report = ControlReport::default();
        let mut next_id = 0u64;
        std::thread::scope(|scope| {
            while !shutdown.load(Ordering::SeqCst) {
                match poll_readable(listener.listener.as_raw_fd(), 100) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                }
                let stream = match listener.listener.accept() {
                    Ok((s, _)) => s,
                    Err(_) => {
                        // A client gone before accept, or out of descriptors: back off.
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                if stream.set_nonblocking(false).is_err() {
                    continue;
                }
                let refuse = |stream: &UnixStream, err: CliError| {
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = (&*stream).write_all(&Reply::failure(&err).to_line());
                };
                match peer_uid(&stream) {
                    Ok(uid) if uid == owner => {}
                    Ok(uid) => {
                        report.refused += 1;
                        refuse(
                            &stream,
                            CliError::failure(format!(
                                "uid {uid} may not use this control socket (only uid {owner})"
                            )),
                        );
                        continue;
                    }
                    Err(_) => {
                        report.refused += 1;
                        continue;
                    }
                }
                if active.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                    report.refused += 1;
                    refuse(
                        &stream,
                        CliError::failure(format!(
                            "{MAX_CONNECTIONS} control connections are open already; try again"
                        )),
                    );
                    continue;
                }
                let Ok(handle) = stream.try_clone() else {
                    continue;
                };
                report.connections += 1;
                let id = next_id;
                next_id += 1;
                lock(&open).insert(id, handle);
                active.fetch_add(1, Ordering::SeqCst);
                let (open, active, requests) = (&open, &active, &requests);
                let spawned = std::thread::Builder::new()
                    .name(format!("raidkit-ctl-{id}"))
                    .spawn_scoped(scope, move || {
                        self.serve_connection(&stream, requests, shutdown);
                        lock(open).remove(&id);
                        active.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    lock(open).remove(&id);
                    active.fetch_sub(1, Ordering::SeqCst);
                }
            }
            // Idle connections are waiting in read: wake them. A request in progress still
            // finishes and gets its reply; the scope then waits for it.
            for s in lock(&open).values() {
                let _ = s.shutdown(std::net::Shutdown::Read);
            }
        });
        report.requests = requests.load(Ordering::Relaxed);
        report
    }

    /// Serves one connection: request lines in, reply lines out, until the client closes,
    /// idles too long, sends an overlong line, or the server shuts down.
    pub fn serve_connection(
        &self,
        stream: &UnixStream,
        requests: &AtomicU64,
        shutdown: &AtomicBool,
    ) {
        if stream.set_read_timeout(Some(IDLE_TIMEOUT)).is_err()
            || stream.set_write_timeout(Some(IDLE_TIMEOUT)).is_err()
        {
            return;
        }
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = match (&mut reader)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut line)
            {
                Ok(n) => n,
                // Timed out, reset, or shut down for the server's shutdown.
                Err(_) => return,
            };
            if n == 0 {
                return;
            }
            let complete = line.last() == Some(&b'\n');
            if !complete && line.len() > MAX_LINE_BYTES {
                let err = CliError::usage(format!(
                    "request longer than {MAX_LINE_BYTES} bytes; closing the connection"
                ));
                let _ = (&*stream).write_all(&Reply::failure(&err).to_line());
                return;
            }
            if !complete {
                // The client closed in the middle of a line: nothing to answer.
                return;
            }
            if shutdown.load(Ordering::SeqCst) {
                let err = CliError::failure("the server is shutting down");
                let _ = (&*stream).write_all(&Reply::failure(&err).to_line());
                return;
            }
            requests.fetch_add(1, Ordering::Relaxed);
            let reply =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.handle_line(&line)))
                    .unwrap_or_else(|_| {
                        Reply::failure(&CliError::failure(
                            "internal error while handling the request",
                        ))
                    });
            if (&*stream).write_all(&reply.to_line()).is_err() {
                return;
            }
        }
    }

    /// Parses and runs one request line.
    pub fn handle_line(&self, line: &[u8]) -> Reply {
        match parse_request(line).and_then(|r| self.handle(r)) {
            Ok(v) => Reply::success(v),
            Err(e) => Reply::failure(&e),
        }
    }

    fn find(&self, name: Option<&str>) -> Result<&ServedArray, CliError> {
        let names = || {
            self.arrays
                .iter()
                .map(|a| a.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match name {
            Some(n) => self.arrays.iter().find(|a| a.name == n).ok_or_else(|| {
                CliError::usage(format!(
                    "no array {n:?} is served here (served: {})",
                    names()
                ))
            }),
            None if self.arrays.len() == 1 => Ok(&self.arrays[0]),
            None => Err(CliError::usage(format!(
                "several arrays are served; say which with --array NAME (served: {})",
                names()
            ))),
        }
    }

    /// A span of a served RAID 50/60 stack, named `NAME/spanN` (as the server's log names
    /// it): the served array and the span. `None` when `name` names no span.
    fn find_span(
        &self,
        name: Option<&str>,
    ) -> Result<Option<(&ServedArray, Arc<raidkit_engine::Array>)>, CliError> {
        let Some((array, i)) = name.and_then(|n| n.rsplit_once("/span")) else {
            return Ok(None);
        };
        let Ok(i) = i.parse::<usize>() else {
            return Ok(None);
        };
        let served = self.find(Some(array))?;
        let stack = served.array()?;
        let span = stack.spans().get(i).cloned().ok_or_else(|| {
            CliError::usage(format!(
                "{array} has no span {i} (it has {})",
                stack.spans().len()
            ))
        })?;
        Ok(Some((served, span)))
    }

    /// The path a new member (added or a replacement) is given as: absolute, not a member
    /// of any served array (this one or another), not one of the server's global spares.
    fn new_member_path(&self, path: &str) -> Result<PathBuf, CliError> {
        let path = PathBuf::from(path);
        if !path.is_absolute() {
            return Err(CliError::usage(format!(
                "{}: the server needs an absolute path",
                path.display()
            )));
        }
        for other in &self.arrays {
            let Ok(st) = status_of(other) else { continue };
            if member_of(&st, &path.to_string_lossy(), &other.name).is_ok() {
                return Err(CliError::new(
                    ExitCode::Refused,
                    format!(
                        "{} is already a member of the served array {}",
                        path.display(),
                        other.name
                    ),
                ));
            }
        }
        if self.spares.holds(&path) {
            return Err(CliError::new(
                ExitCode::Refused,
                format!(
                    "{} is a global spare of this server; it goes to the first array \
                     that needs it",
                    path.display()
                ),
            ));
        }
        Ok(path)
    }

    fn writable(served: &ServedArray) -> Result<(), CliError> {
        if served.read_only {
            return Err(CliError::usage(format!(
                "{} is served read-only; its members are not changed",
                served.name
            )));
        }
        Ok(())
    }

    fn handle(&self, request: Request) -> Result<serde_json::Value, CliError> {
        match request {
            Request::List => {
                let arrays: Vec<serde_json::Value> = self
                    .arrays
                    .iter()
                    .map(|a| match status_of(a) {
                        Ok(s) => serde_json::json!({
                            "name": a.name,
                            // A RAID 50/60 stack's spans, each addressable as an array of
                            // its own for `detail` and events (`NAME/spanN`).
                            "spans": a.array().map(|x| (0..x.spans().len()).map(|i| format!("{}/span{i}", a.name)).collect::<Vec<_>>()).unwrap_or_default(),
                            "level": s.level,
                            "raid_disks": s.raid_disks,
                            "array_bytes": s.array_bytes,
                            "degraded": s.degraded,
                            "failed": s.failed,
                            "read_only": a.read_only,
                            "reshaping": matches!(a.slot.get(), Backend::Reshaping(_)),
                        }),
                        Err(e) => serde_json::json!({ "name": a.name, "error": e.message }),
                    })
                    .collect();
                Ok(serde_json::json!({
                    "arrays": arrays,
                    "global_spares": self.spares.waiting(),
                    "global_spare_log": self.spares.log(),
                }))
            }
            Request::Detail { array } => {
                if let Some((served, span)) = self.find_span(array.as_deref())? {
                    return Ok(serde_json::json!({
                        "array": array,
                        "stack": served.name,
                        "read_only": served.read_only,
                        "status": span.status(),
                    }));
                }
                let served = self.find(array.as_deref())?;
                let mut result = result_of(served, None);
                // The server's global spares serve this array too.
                result["global_spares"] = serde_json::json!(self.spares.waiting());
                result["global_spare_log"] = serde_json::json!(self.spares.log());
                Ok(result)
            }
            Request::Events {
                array,
                since,
                wait_ms,
            } => {
                let wait = Duration::from_millis(wait_ms.unwrap_or(0).min(MAX_EVENTS_WAIT_MS));
                // A span of a stack (`NAME/spanN`): its own events.
                let (served, span) = match self.find_span(array.as_deref())? {
                    Some((served, span)) => (served, Some(span)),
                    None => (self.find(array.as_deref())?, None),
                };
                let name = array.clone().unwrap_or_else(|| served.name.clone());
                let Some(current) = span.or_else(|| served.array().ok()) else {
                    // An online reshape runs: the array's events start again once it is
                    // assembled in its new shape (a `next` below `since` says so).
                    std::thread::sleep(wait);
                    let n = since.unwrap_or(0);
                    return Ok(serde_json::json!({
                        "array": name,
                        "first": n,
                        "next": n,
                        "events": [],
                    }));
                };
                let (first, events) = match since {
                    Some(n) => current.events_since(n, wait),
                    None => current.events_since(u64::MAX, Duration::ZERO),
                };
                Ok(serde_json::json!({
                    "array": name,
                    "first": first,
                    "next": first + events.len() as u64,
                    "events": events,
                }))
            }
            Request::StartTask { array, task } => {
                let served = self.find(array.as_deref())?;
                let kind = TaskKind::from_name(&task)
                    .filter(|k| *k != TaskKind::Replace)
                    .ok_or_else(|| {
                        CliError::usage(format!(
                            "task {task}: use check, repair, patrol, rebuild or resync"
                        ))
                    })?;
                if kind != TaskKind::Check && kind != TaskKind::Patrol {
                    Self::writable(served)?;
                }
                served.array()?.request_task(kind).map_err(engine_error)?;
                Ok(result_of(served, None))
            }
            Request::Grow {
                array,
                raid_devices,
                level,
                layout,
                chunk_sectors,
                array_sectors,
            } => {
                let served = self.find(array.as_deref())?;
                Self::writable(served)?;
                let target = raidkit_engine::ReshapeTarget {
                    raid_devices,
                    level,
                    layout,
                    chunk_sectors,
                    array_sectors,
                };
                let started =
                    super::reshape::start(&served.name, &served.slot, &target, &self.log)?;
                if let Some(online) = started {
                    let (name, slot, log) =
                        (served.name.clone(), served.slot.clone(), self.log.clone());
                    slot.driving
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                    std::thread::spawn(move || super::reshape::drive(&name, &slot, &online, &log));
                }
                Ok(result_of(served, None))
            }
            Request::StopTask { array } => {
                let served = self.find(array.as_deref())?;
                served.array()?.cancel_task();
                Ok(result_of(served, None))
            }
            Request::Rates {
                array,
                rebuild_percent,
                resync_percent,
                check_percent,
                patrol_percent,
                reshape_percent,
                max_bytes_per_s,
                min_bytes_per_s,
            } => {
                let served = self.find(array.as_deref())?;
                // Kept by the slot too: an online reshape paces itself by it, and the array
                // a reshape leaves behind gets them.
                let rates = crate::config::RatesSpec {
                    rebuild_percent,
                    resync_percent,
                    check_percent,
                    patrol_percent,
                    reshape_percent,
                    max_bytes_per_s,
                    min_bytes_per_s,
                }
                .apply(served.slot.rates())?;
                served.slot.set_rates(rates);
                let mut result = result_of(served, None);
                result["rates"] = serde_json::to_value(rates).unwrap_or_default();
                Ok(result)
            }
            Request::ReadAhead { array, policy } => {
                let served = self.find(array.as_deref())?;
                served.slot.set_read_ahead(policy);
                let mut result = result_of(served, None);
                result["read_ahead"] = serde_json::to_value(policy).unwrap_or_default();
                Ok(result)
            }
            Request::WritePolicy { array, policy } => {
                let served = self.find(array.as_deref())?;
                Self::writable(served)?;
                served.slot.set_write_policy(policy).map_err(engine_error)?;
                let mut result = result_of(served, None);
                result["write_policy"] = serde_json::to_value(policy).unwrap_or_default();
                Ok(result)
            }
            Request::Fail { array, member } => {
                let served = self.find(array.as_deref())?;
                Self::writable(served)?;
                let current = holding(served.array()?, &member, &served.name)?;
                let status = current.status();
                let (index, name) = member_of(&status, &member, &served.name)?;
                let was_faulty = status
                    .members
                    .iter()
                    .any(|m| m.index == index && m.role == "faulty");
                current.fail_member(index).map_err(engine_error)?;
                let mut result = result_of(served, Some(&name));
                result["was_faulty"] = serde_json::Value::from(was_faulty);
                Ok(result)
            }
            Request::Remove { array, member } => {
                let served = self.find(array.as_deref())?;
                Self::writable(served)?;
                let current = holding(served.array()?, &member, &served.name)?;
                let (index, name) = member_of(&current.status(), &member, &served.name)?;
                current.remove_member(index).map_err(engine_error)?;
                Ok(result_of(served, Some(&name)))
            }
            Request::Add {
                array,
                path,
                size_bytes,
                force,
            } => {
                let served = self.find(array.as_deref())?;
                Self::writable(served)?;
                let path = self.new_member_path(&path)?;
                let disk = open_or_create(&path, size_bytes)?;
                let name = disk.name().to_string();
                let target = missing_a_member(served.array()?, &served.name)?;
                let re_added = {
                    let _writes_held = served.gate.hold_writes();
                    add_or_re_add(&target, disk, &path, force, || {
                        open_or_create(&path, size_bytes)
                    })?
                };
                let mut result = result_of(served, Some(&name));
                result["re_added_slot"] = serde_json::json!(re_added);
                Ok(result)
            }
            Request::Replace {
                array,
                member,
                with,
                size_bytes,
            } => {
                let served = self.find(array.as_deref())?;
                Self::writable(served)?;
                let current = holding(served.array()?, &member, &served.name)?;
                let (index, _) = member_of(&current.status(), &member, &served.name)?;
                let path = self.new_member_path(&with)?;
                let disk = open_or_create(&path, size_bytes)?;
                let name = disk.name().to_string();
                if let Ok(found) = raidkit_engine::read_superblock(disk.as_ref()) {
                    return Err(CliError::new(
                        ExitCode::Refused,
                        format!(
                            "{}: holds an md superblock (array {}); a replacement is written whole, which would overwrite it. Wipe it first",
                            path.display(),
                            found.sb.set_uuid.to_mdadm_string()
                        ),
                    ));
                }
                {
                    let _writes_held = served.gate.hold_writes();
                    current
                        .replace_member(index, disk, random_uuid()?)
                        .map_err(engine_error)?;
                }
                Ok(result_of(served, Some(&name)))
            }
        }
    }
}

/// Parses a request line (trailing newline and surrounding blanks allowed).
pub fn parse_request(line: &[u8]) -> Result<Request, CliError> {
    let text = std::str::from_utf8(line)
        .map_err(|_| CliError::usage("a request must be UTF-8 JSON"))?
        .trim();
    if text.is_empty() {
        return Err(CliError::usage("empty request"));
    }
    serde_json::from_str(text).map_err(|e| CliError::usage(format!("bad request: {e}")))
}

/// The served array's status; while an online reshape runs, its new layout's (with the
/// reshape's progress in `result_of`).
fn status_of(served: &ServedArray) -> Result<Status, CliError> {
    match served.slot.get() {
        Backend::Array(a) => Ok(a.status()),
        Backend::Reshaping(r) => r.status().ok_or_else(|| {
            CliError::failure(format!(
                "{}: the reshape is done but the array is not assembled again: {}",
                served.name,
                r.error().unwrap_or_default()
            ))
        }),
    }
}

fn result_of(served: &ServedArray, member: Option<&str>) -> serde_json::Value {
    let status = match status_of(served) {
        Ok(st) => serde_json::to_value(st).unwrap_or_default(),
        Err(e) => serde_json::json!({ "error": e.message }),
    };
    let mut v = serde_json::json!({
        "array": served.name,
        "nbd": served.nbd_address,
        "read_only": served.read_only,
        "status": status,
    });
    if let Backend::Reshaping(r) = served.slot.get() {
        let (done, end) = r.progress();
        let report = r.report();
        v["reshape"] = serde_json::json!({
            "position_sectors": r.position(),
            "end_sectors": end,
            "backwards": report.backwards,
            "percent": done as f64 * 100.0 / end.max(1) as f64,
            "old_raid_devices": report.old_raid_devices,
            "new_raid_devices": report.new_raid_devices,
            "old_level": report.old_level,
            "new_level": report.new_level,
            "old_chunk_sectors": report.old_chunk_sectors,
            "new_chunk_sectors": report.new_chunk_sectors,
            "error": r.error(),
        });
    }
    if let Some(m) = member {
        v["member"] = serde_json::Value::from(m);
    }
    v
}

/// The member of `status` named `wanted`: by its name, or by canonical path.
/// The array a request about `wanted` acts on: `array` itself, or for a RAID 50/60 stack the
/// span that holds `wanted` (the stack's RAID 0 has the spans as members, not the disks).
fn holding(
    array: Arc<raidkit_engine::Array>,
    wanted: &str,
    name: &str,
) -> Result<Arc<raidkit_engine::Array>, CliError> {
    if array.spans().is_empty() {
        return Ok(array);
    }
    array
        .spans()
        .iter()
        .find(|span| member_of(&span.status(), wanted, name).is_ok())
        .cloned()
        .ok_or_else(|| {
            CliError::usage(format!(
                "{wanted} is not a member of any span of the RAID {} stack {name}",
                array.stack_level().unwrap_or_default()
            ))
        })
}

/// The array a new member joins: `array` itself, or for a RAID 50/60 stack the first span
/// that misses a member (a stack takes no spares: refused when none does).
fn missing_a_member(
    array: Arc<raidkit_engine::Array>,
    name: &str,
) -> Result<Arc<raidkit_engine::Array>, CliError> {
    if array.spans().is_empty() {
        return Ok(array);
    }
    array
        .spans()
        .iter()
        .find(|span| !span.status().missing_slots.is_empty())
        .cloned()
        .ok_or_else(|| {
            CliError::new(
                ExitCode::Refused,
                format!(
                    "no span of the RAID {} stack {name} misses a member, and a stack takes no spares",
                    array.stack_level().unwrap_or_default()
                ),
            )
        })
}

fn member_of(status: &Status, wanted: &str, array: &str) -> Result<(usize, String), CliError> {
    if let Some(m) = status.members.iter().find(|m| m.name == wanted) {
        return Ok((m.index, m.name.clone()));
    }
    let canon = |p: &str| std::fs::canonicalize(p).ok();
    if let Some(want) = canon(wanted) {
        if let Some(m) = status
            .members
            .iter()
            .find(|m| canon(&m.name).as_ref() == Some(&want))
        {
            return Ok((m.index, m.name.clone()));
        }
    }
    let names: Vec<&str> = status.members.iter().map(|m| m.name.as_str()).collect();
    Err(CliError::usage(format!(
        "{wanted} is not a member of {array} (members: {})",
        names.join(", ")
    )))
}

// ---------------------------------------------------------------------------------------------
// Client

/// A connection to a control socket.
pub struct ControlClient {
    reader: BufReader<UnixStream>,
    path: PathBuf,
}

impl ControlClient {
    pub fn connect(path: &Path) -> Result<ControlClient, CliError> {
        let stream = UnixStream::connect(path).map_err(|e| {
            CliError::failure(format!(
                "{}: cannot connect to the control socket ({e}); is `raidkit serve` running?",
                path.display()
            ))
        })?;
        Ok(ControlClient {
            reader: BufReader::new(stream),
            path: path.to_path_buf(),
        })
    }

    /// Sends one request and returns its result, or the server's error with its exit code.
    pub fn call(&mut self, request: &Request) -> Result<serde_json::Value, CliError> {
        let lost = |e: io::Error| {
            CliError::failure(format!("{}: control connection: {e}", self.path.display()))
        };
        let mut line = serde_json::to_vec(request)
            .map_err(|e| CliError::failure(format!("cannot encode the request: {e}")))?;
        line.push(b'\n');
        // A server that refuses the connection replies with an error and closes before
        // reading; then the write fails but the reply is waiting to be read.
        let sent = self.reader.get_ref().write_all(&line);
        let mut reply = Vec::new();
        let received = (&mut self.reader)
            .take(MAX_REPLY_BYTES as u64)
            .read_until(b'\n', &mut reply);
        if reply.last() != Some(&b'\n') {
            sent.map_err(lost)?;
            received.map_err(lost)?;
            return Err(CliError::failure(format!(
                "{}: the server closed the connection without a reply",
                self.path.display()
            )));
        }
        let reply: Reply = serde_json::from_slice(&reply).map_err(|e| {
            CliError::failure(format!("{}: malformed reply: {e}", self.path.display()))
        })?;
        if reply.ok {
            return Ok(reply.result.unwrap_or(serde_json::Value::Null));
        }
        let code = match reply.code {
            Some(2) => ExitCode::Usage,
            Some(3) => ExitCode::Refused,
            Some(4) => ExitCode::Unavailable,
            Some(5) => ExitCode::Mismatch,
            _ => ExitCode::Failure,
        };
        Err(CliError::new(
            code,
            reply.error.unwrap_or_else(|| "request failed".into()),
        ))
    }
}

/// A path for the server: absolute, and canonical when the file exists (the server runs in
/// another directory).
fn absolute(path: &Path) -> Result<String, CliError> {
    let abs = match std::fs::canonicalize(path) {
        Ok(p) => p,
        Err(_) if path.is_absolute() => path.to_path_buf(),
        Err(_) => std::env::current_dir()?.join(path),
    };
    abs.to_str()
        .map(str::to_string)
        .ok_or_else(|| CliError::usage(format!("{}: the path must be valid UTF-8", path.display())))
}

/// The status part of a result, in the shape the text printer reads.
fn status_view(result: &serde_json::Value) -> Result<StatusView, CliError> {
    serde_json::from_value(result["status"].clone())
        .map_err(|e| CliError::failure(format!("malformed status in the reply: {e}")))
}

fn print_json(value: &serde_json::Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| CliError::failure(e.to_string()))?;
    println!("{text}");
    Ok(())
}

/// `raidkit detail --control PATH [--array NAME] [--json]`.
pub fn detail(control: &Path, array: Option<&str>, json: bool) -> Result<(), CliError> {
    let result = ControlClient::connect(control)?.call(&Request::Detail {
        array: array.map(str::to_string),
    })?;
    if json {
        return print_json(&result);
    }
    let view = status_view(&result)?;
    println!(
        "         Served : {} on {}{}",
        result["array"].as_str().unwrap_or_default(),
        result["nbd"].as_str().unwrap_or("?"),
        if result["read_only"].as_bool() == Some(true) {
            " (read-only)"
        } else {
            ""
        }
    );
    print_detail(&view, &view.state_text());
    if let Some(waiting) = result["global_spares"].as_array() {
        if !waiting.is_empty() {
            let names: Vec<&str> = waiting.iter().filter_map(|v| v.as_str()).collect();
            println!("  Global spares : {}", names.join(" "));
        }
    }
    Ok(())
}

/// `raidkit fail --control PATH [--array NAME] --member M`.
pub fn fail(
    control: &Path,
    array: Option<&str>,
    member: &Path,
    json: bool,
) -> Result<(), CliError> {
    let result = ControlClient::connect(control)?.call(&Request::Fail {
        array: array.map(str::to_string),
        member: absolute(member)?,
    })?;
    let view = status_view(&result)?;
    if json {
        print_json(&result)?;
    } else {
        println!(
            "raidkit: {} {}; array {} is {}",
            member.display(),
            if result["was_faulty"].as_bool() == Some(true) {
                "was faulty already"
            } else {
                "marked faulty"
            },
            result["array"].as_str().unwrap_or_default(),
            view.health()
        );
    }
    if view.failed {
        return Err(CliError::new(
            ExitCode::Unavailable,
            "the array has lost more members than it can",
        ));
    }
    Ok(())
}

/// `raidkit remove --control PATH [--array NAME] --member M`.
pub fn remove(
    control: &Path,
    array: Option<&str>,
    member: &Path,
    json: bool,
) -> Result<(), CliError> {
    let result = ControlClient::connect(control)?.call(&Request::Remove {
        array: array.map(str::to_string),
        member: absolute(member)?,
    })?;
    if json {
        return print_json(&result);
    }
    println!(
        "raidkit: {} removed from array {}",
        member.display(),
        result["array"].as_str().unwrap_or_default()
    );
    Ok(())
}

/// How an added member stands in a status: rebuilt (or nothing to rebuild), or still waiting.
fn added_member_settled(view: &StatusView, name: &str) -> Option<bool> {
    let view = view_holding(view, name);
    let m = view.members.iter().find(|m| m.name == name)?;
    Some(m.role == "active" || (m.role == "spare" && !view.degraded) || view.failed)
}

/// The view of the array `name` is a member of: `view`, or a stack's span that holds it.
fn view_holding<'a>(view: &'a StatusView, name: &str) -> &'a StatusView {
    view.stack
        .as_ref()
        .and_then(|s| {
            s.spans
                .iter()
                .find(|span| span.members.iter().any(|m| m.name == name))
        })
        .unwrap_or(view)
}

/// Polls the array's detail every 200 ms until `settled` says so, noting every 5 s on
/// standard error (unless `json`) that it waits for `what`; the last view and reply.
fn wait_until(
    client: &mut ControlClient,
    array: &Option<String>,
    mut view: StatusView,
    mut last: serde_json::Value,
    settled: impl Fn(&StatusView) -> bool,
    what: &str,
    json: bool,
) -> Result<(StatusView, serde_json::Value), CliError> {
    let start = Instant::now();
    let mut next_note = Duration::from_secs(5);
    while !settled(&view) {
        std::thread::sleep(Duration::from_millis(200));
        last = client.call(&Request::Detail {
            array: array.clone(),
        })?;
        view = status_view(&last)?;
        if !json && start.elapsed() >= next_note {
            eprintln!(
                "raidkit: waiting for {what} ({} s)",
                start.elapsed().as_secs()
            );
            next_note += Duration::from_secs(5);
        }
    }
    Ok((view, last))
}

/// `raidkit add --control PATH [--array NAME] --member M [--size S] [--wait]`.
pub fn add(
    control: &Path,
    array: Option<&str>,
    member: &Path,
    size_bytes: Option<u64>,
    force: bool,
    wait: bool,
    json: bool,
) -> Result<(), CliError> {
    let mut client = ControlClient::connect(control)?;
    let array = array.map(str::to_string);
    let result = client.call(&Request::Add {
        array: array.clone(),
        path: absolute(member)?,
        size_bytes,
        force,
    })?;
    let name = result["member"].as_str().unwrap_or_default().to_string();
    let re_added = result["re_added_slot"].as_u64();
    let mut view = status_view(&result)?;
    let mut last = result;
    if wait {
        // The engine may rebuild in the background: poll until the new member is active.
        let what = format!("the rebuild onto {}", member.display());
        let settled = |v: &StatusView| added_member_settled(v, &name) != Some(false);
        (view, last) = wait_until(&mut client, &array, view, last, settled, &what, json)?;
    }
    if json {
        last["re_added_slot"] = serde_json::json!(re_added);
        return print_json(&last);
    }
    let role = view_holding(&view, &name)
        .members
        .iter()
        .find(|m| m.name == name)
        .map(|m| m.role.clone())
        .unwrap_or_else(|| "gone".into());
    if let Some(slot) = re_added {
        println!(
            "raidkit: {} re-added into slot {slot} (only what it missed is rebuilt); it is {role}",
            member.display()
        );
        return Ok(());
    }
    match role.as_str() {
        "active" => println!(
            "raidkit: {} added and rebuilt; array is {}",
            member.display(),
            view.health()
        ),
        "spare" if view.degraded => println!(
            "raidkit: {} added; it is being rebuilt into a missing slot (follow with detail, or add --wait)",
            member.display()
        ),
        "spare" => println!("raidkit: {} added as a spare", member.display()),
        other => println!("raidkit: {} added; it is {other}", member.display()),
    }
    Ok(())
}

/// `raidkit replace --control PATH [--array NAME] --member M --with NEW [--size S] [--wait]`.
pub fn replace(
    control: &Path,
    array: Option<&str>,
    member: &Path,
    with: &Path,
    size_bytes: Option<u64>,
    wait: bool,
    json: bool,
) -> Result<(), CliError> {
    let mut client = ControlClient::connect(control)?;
    let array = array.map(str::to_string);
    let result = client.call(&Request::Replace {
        array: array.clone(),
        member: absolute(member)?,
        with: absolute(with)?,
        size_bytes,
    })?;
    let name = result["member"].as_str().unwrap_or_default().to_string();
    let mut view = status_view(&result)?;
    let mut last = result;
    // Done when the new member holds the slot (active), or the array failed.
    let settled = |v: &StatusView| {
        v.failed
            || v.members
                .iter()
                .any(|m| m.name == name && m.role == "active")
            || !v.members.iter().any(|m| m.name == name)
    };
    if wait {
        let what = format!("the copy of {} onto {}", member.display(), with.display());
        (view, last) = wait_until(&mut client, &array, view, last, settled, &what, json)?;
    }
    if json {
        return print_json(&last);
    }
    let role = view_holding(&view, &name)
        .members
        .iter()
        .find(|m| m.name == name)
        .map(|m| m.role.clone())
        .unwrap_or_else(|| "gone".into());
    match role.as_str() {
        "active" => println!(
            "raidkit: {} copied onto {}, which holds its slot now; the old member is marked faulty (remove it); array is {}",
            member.display(),
            with.display(),
            view.health()
        ),
        _ => println!(
            "raidkit: copying {} onto {} while the array stays whole (it is {role}; follow with detail, or replace --wait)",
            member.display(),
            with.display()
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_into_typed_values() {
        assert_eq!(parse_request(br#"{"op":"list"}"#).unwrap(), Request::List);
        assert_eq!(
            parse_request(b"{\"op\":\"detail\"}\n").unwrap(),
            Request::Detail { array: None }
        );
        assert_eq!(
            parse_request(br#"{"op":"fail","array":"md0","member":"/a/b.img"}"#).unwrap(),
            Request::Fail {
                array: Some("md0".into()),
                member: "/a/b.img".into()
            }
        );
        assert_eq!(
            parse_request(br#"{"op":"add","path":"/n.img","size_bytes":4096}"#).unwrap(),
            Request::Add {
                array: None,
                path: "/n.img".into(),
                size_bytes: Some(4096),
                force: false,
            }
        );
        assert_eq!(
            parse_request(br#"{"op":"replace","member":"/a.img","with":"/n.img"}"#).unwrap(),
            Request::Replace {
                array: None,
                member: "/a.img".into(),
                with: "/n.img".into(),
                size_bytes: None,
            }
        );
        assert_eq!(
            parse_request(br#"{"op":"events","since":7,"wait_ms":500}"#).unwrap(),
            Request::Events {
                array: None,
                since: Some(7),
                wait_ms: Some(500)
            }
        );
        // Round trip: what the client sends is what the server reads.
        for r in [
            Request::List,
            Request::Events {
                array: Some("md0".into()),
                since: None,
                wait_ms: None,
            },
            Request::Remove {
                array: None,
                member: "x".into(),
            },
        ] {
            let line = serde_json::to_vec(&r).unwrap();
            assert_eq!(parse_request(&line).unwrap(), r);
        }
    }

    #[test]
    fn garbage_requests_are_usage_errors() {
        for bad in [
            &b""[..],
            b"   \n",
            b"\xff\xfe{}",
            b"{",
            b"[]",
            b"null",
            b"{\"op\":\"format\"}",
            b"{\"op\":\"fail\"}",
            b"{\"op\":\"fail\",\"member\":7}",
            b"{\"op\":\"detail\",\"array\":\"md0\",\"extra\":1}",
            b"{\"op\":\"add\",\"path\":\"/x\",\"size_bytes\":-1}",
            b"{\"op\":\"add\",\"path\":\"/x\",\"size_bytes\":1e99}",
            b"{\"op\":\"list\"} {\"op\":\"list\"}",
        ] {
            let err = parse_request(bad).unwrap_err();
            assert_eq!(
                err.code,
                ExitCode::Usage,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
