//! `raidkit serve`: export arrays as Network Block Device disks.
//!
//! Each array is assembled from its member files, wrapped in [`ArrayExport`] (the NBD server's
//! view of an array: it only moves bytes and declares capabilities), and served on a unix socket
//! or on TCP bound to loopback unless `--bind` says otherwise. Beside it a control socket (see
//! [`super::control`]) lets `raidkit detail|fail|remove|add --control PATH` manage the served
//! arrays. Global hot spares (`--spare`, see [`super::spares`]) go to the first array left
//! degraded without a spare of its own; `--inject` wraps chosen members in a fault-injecting
//! disk (`raidkit_sim::FaultyDisk`) for tests and drills. On SIGINT or SIGTERM the server stops accepting, lets in-flight requests finish,
//! flushes every export, waits for control requests in progress (a rebuild onto an added
//! member), and then every array is stopped, which marks it clean in its superblocks.
//!
//! Multi-connection clients: `ArrayExport` advertises `NBD_FLAG_CAN_MULTI_CONN`, which promises
//! that a flush on any connection makes durable every write any connection has seen a reply
//! for. That holds because the engine replies to a write only after every member write of it
//! has completed (returned from the member's `pwrite`), and `Array::flush` fdatasyncs every
//! member that receives writes, whichever connection the writes came from; the test
//! `flush_on_one_connection_covers_writes_from_another` checks it on simulated members that
//! keep volatile and durable bytes apart.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use raidkit_engine::{Array, AssembleOptions, EngineError};
use raidkit_nbd::{BlockSize, Export, Listener, Server, ServerEvent, TlsConfig, TlsMode};
use raidkit_sim::{FaultSpec, FaultyDisk};

use super::control::{ControlListener, ControlServer, ServedArray};
use super::log::{LogFormat, ServerLog};
use super::spares::GlobalSpares;
use raidkit_cli::common::{
    assembly_error, engine_error, open_members_mapped, open_or_create, parse_size_bytes, RUN_HELP,
};
use raidkit_cli::{CliError, ExitCode};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Members of the array to export (image files or block devices). Image files on tmpfs
    /// with every page allocated (`fallocate -l SIZE FILE`) are mapped into memory, which
    /// makes their I/O a memory copy, about 1.5 times as fast (see --no-map).
    #[arg(required_unless_present = "array")]
    pub members: Vec<PathBuf>,
    /// Never map members into memory: every member I/O is a pread/pwrite system call (the
    /// server's memory then counts no member pages).
    #[arg(long)]
    pub no_map: bool,
    /// Export name of the array given by MEMBER… .
    #[arg(long, default_value = "array")]
    pub name: String,
    /// One more array to export, as NAME=MEMBER,MEMBER,… (repeatable).
    #[arg(long = "array", value_name = "NAME=MEMBERS")]
    pub array: Vec<String>,
    /// Listen on this unix socket.
    #[arg(long, conflicts_with = "port")]
    pub socket: Option<PathBuf>,
    /// Listen on this TCP port (10809 is NBD's).
    #[arg(long)]
    pub port: Option<u16>,
    /// Address to bind TCP to; loopback unless told otherwise.
    #[arg(long, default_value = "127.0.0.1", requires = "port")]
    pub bind: IpAddr,
    /// Export read-only: members are opened read-only and never written.
    #[arg(long)]
    pub read_only: bool,
    /// Assemble stale members or a dirty degraded parity array anyway (mdadm --force).
    #[arg(long)]
    pub force: bool,
    #[arg(long, help = RUN_HELP)]
    pub run: bool,
    /// Control socket (unix, mode 0600, owner only) through which
    /// `raidkit detail|fail|remove|add --control PATH` manage the served arrays
    /// [default: the NBD socket's path with ".ctl" appended; with --port none unless given].
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Open no control socket.
    #[arg(long, conflicts_with = "control")]
    pub no_control: bool,
    /// A global hot spare (repeatable): a blank image file or block device that goes to the
    /// first served array left degraded without a spare of its own, which then rebuilds onto
    /// it in the background. A disk carrying an md superblock is refused.
    #[arg(long = "spare", value_name = "PATH")]
    pub spares: Vec<PathBuf>,
    /// Size of global spare image files that do not exist yet (created on start), e.g. 512M.
    #[arg(long, value_name = "SIZE")]
    pub spare_size: Option<String>,
    /// Inject faults into a member, as MEMBER=RULES (repeatable; for tests and drills, like
    /// nbdkit's error filter). RULES: comma-separated read-error=, write-error=, flush-error=
    /// (per mille), bad-read=START-END, bad-write=START-END (bytes, K/M/G), fail-after=N
    /// (requests), delay=2ms, seed=N; e.g. `--inject m1.img=fail-after=5000`.
    #[arg(long = "inject", value_name = "MEMBER=RULES")]
    pub inject: Vec<String>,
    /// NBD requests executed at once per connection.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// Log lines as text, or as one JSON object per line for log collectors. Every state
    /// change is logged with a timestamp: members failing and why, spares taken, tasks
    /// started and finished, the array degraded or failed, clients and why any was refused.
    #[arg(long = "log-format", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// NBD's STARTTLS: off, on (offered; clients choose) or require (every client must use
    /// TLS before it may see an export). Default: require when --tls-cert is given, else off.
    #[arg(long, value_enum, value_name = "MODE")]
    pub tls: Option<TlsArg>,
    /// The server's certificate chain (PEM), for TLS.
    #[arg(long = "tls-cert", value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The server's private key (PEM), for TLS.
    #[arg(long = "tls-key", value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Certificate authority (PEM) whose client certificates are accepted: with it, every
    /// TLS client must present a certificate it signed (authentication, as qemu-nbd's
    /// verify-peer and nbdkit's --tls-verify-peer).
    #[arg(long = "tls-client-ca", value_name = "PEM", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Clients served at once; one more is refused (and logged).
    #[arg(long = "max-connections", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_connections: u32,
    /// Close a client connection that sends nothing for this many seconds while none of its
    /// requests is in flight (and log it). Off by default: an idle mounted filesystem sends
    /// nothing for hours, and NBD clients do not reconnect.
    #[arg(long = "idle-timeout", value_name = "SECONDS")]
    pub idle_timeout: Option<u64>,
    /// Payload bytes one connection may hold in the server at once (write data read, read
    /// data not yet sent; K, M, G suffix): a client that never reads its replies cannot make
    /// the server hold more.
    #[arg(long = "max-inflight", value_name = "SIZE", default_value = "32M")]
    pub max_inflight: String,
    /// Mode of the NBD unix socket (octal), set explicitly whatever the umask.
    #[arg(long = "socket-mode", value_name = "OCTAL", default_value = "0660")]
    pub socket_mode: String,
    /// Group of the NBD unix socket (name or number): with mode 0660, its members may
    /// connect.
    #[arg(long = "socket-group", value_name = "GROUP", requires = "socket")]
    pub socket_group: Option<String>,
}

/// `--tls`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsArg {
    Off,
    On,
    Require,
}

/// The server's settings beyond the arrays, checked before a member is opened.
struct Settings {
    tls_mode: TlsMode,
    tls: Option<Arc<TlsConfig>>,
    max_inflight: u64,
    socket_mode: u32,
    socket_group: Option<u32>,
}

/// Parses the TLS, limit and socket flags.
fn settings(args: &ServeArgs) -> Result<Settings, CliError> {
    let tls_mode = match (args.tls, &args.tls_cert) {
        (Some(TlsArg::Off), Some(_)) => {
            return Err(CliError::usage(
                "--tls off with --tls-cert: drop one of them",
            ))
        }
        (Some(TlsArg::On | TlsArg::Require), None) => {
            return Err(CliError::usage(
                "--tls on|require needs --tls-cert PEM and --tls-key PEM",
            ))
        }
        (Some(TlsArg::Off), None) | (None, None) => TlsMode::Off,
        (Some(TlsArg::On), Some(_)) => TlsMode::On,
        (Some(TlsArg::Require), Some(_)) | (None, Some(_)) => TlsMode::Require,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(Arc::new(
            TlsConfig::from_pem_files(cert, key, args.tls_client_ca.as_deref())
                .map_err(|e| CliError::new(ExitCode::Refused, format!("TLS: {e}")))?,
        )),
        _ => None,
    };
    let max_inflight = parse_size_bytes(&args.max_inflight, 1)?;
    if max_inflight < 1 << 20 {
        return Err(CliError::usage(format!(
            "--max-inflight {}: at least 1M",
            args.max_inflight
        )));
    }
    let socket_mode = u32::from_str_radix(args.socket_mode.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| {
            CliError::usage(format!(
                "--socket-mode {}: an octal mode such as 0660",
                args.socket_mode
            ))
        })?;
    let socket_group = match &args.socket_group {
        None => None,
        Some(g) => Some(match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => group_id(g)
                .ok_or_else(|| CliError::usage(format!("--socket-group {g}: no such group")))?,
        }),
    };
    Ok(Settings {
        tls_mode,
        tls,
        max_inflight,
        socket_mode,
        socket_group,
    })
}

/// The id of the group named `name` (`getgrnam_r`).
fn group_id(name: &str) -> Option<u32> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf outlives it; the result is read
    // only when getgrnam_r reports one.
    let rc = unsafe {
        libc::getgrnam_r(
            cname.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    (rc == 0 && !result.is_null()).then_some(grp.gr_gid)
}

/// The control socket's path: `--control`, else the NBD socket's path plus ".ctl".
fn control_path(args: &ServeArgs) -> Result<Option<PathBuf>, CliError> {
    if args.no_control {
        return Ok(None);
    }
    let path = match (&args.control, &args.socket) {
        (Some(p), _) => p.clone(),
        (None, Some(nbd)) => {
            let mut p = nbd.clone().into_os_string();
            p.push(".ctl");
            PathBuf::from(p)
        }
        (None, None) => return Ok(None),
    };
    if args.socket.as_ref() == Some(&path) {
        return Err(CliError::usage(
            "--control and --socket name the same path; give them different ones",
        ));
    }
    Ok(Some(path))
}

/// Holds NBD writes back while a member is attached to a served array.
///
/// `Array::add_spare` only attaches the new member and wakes the background rebuild, which
/// then runs alongside requests (writes reach a member being rebuilt, and the rebuild takes
/// the stripe locks requests take). The gate keeps the attach itself apart from writes in
/// flight: the control server and the global spare pool hold it exclusively for the duration
/// of `add_spare` (milliseconds), and every data-changing export call holds it shared.
#[derive(Default)]
pub struct WriteGate(std::sync::RwLock<()>);

impl WriteGate {
    /// Shared: one data-changing request.
    pub fn write(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        // The guarded value is `()`: a panic elsewhere cannot leave it inconsistent.
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Exclusive: membership change with a rebuild; waits for writes in flight to finish.
    pub fn hold_writes(&self) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// An array as an NBD export.
pub struct ArrayExport {
    array: Arc<Array>,
    read_only: bool,
    gate: Arc<WriteGate>,
}

impl ArrayExport {
    pub fn new(array: Arc<Array>, read_only: bool, gate: Arc<WriteGate>) -> Self {
        ArrayExport {
            array,
            read_only,
            gate,
        }
    }
}

/// An engine error as the NBD server's export reports it: a member without room keeps its
/// errno (the client gets NBD_ENOSPC and may retry once there is space); anything else is an
/// I/O error (NBD_EIO).
fn io_error(err: EngineError) -> io::Error {
    match err {
        EngineError::Disk(d) if d.is_no_space() => io::Error::from(d),
        other => io::Error::other(other.to_string()),
    }
}

impl Export for ArrayExport {
    fn size_bytes(&self) -> u64 {
        self.array.size_bytes()
    }

    fn block_size(&self) -> BlockSize {
        BlockSize {
            minimum_bytes: 512,
            preferred_bytes: 4096,
            maximum_payload_bytes: 32 << 20,
        }
    }

    fn description(&self) -> Option<String> {
        let status = self.array.status();
        Some(format!(
            "raidkit RAID {} over {} members",
            status.level, status.raid_disks
        ))
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn can_fua(&self) -> bool {
        true
    }

    fn can_trim(&self) -> bool {
        true
    }

    fn can_zero(&self) -> bool {
        true
    }

    /// A flush flushes every member of the array, so it covers writes completed on any
    /// connection: multi-connection clients may rely on it.
    fn can_multi_conn(&self) -> bool {
        true
    }

    /// Parity levels: a full stripe, written without reading anything back (and, with a
    /// partial parity log, with no partial parity to log).
    fn write_gather_bytes(&self) -> u64 {
        self.array.full_stripe_bytes().unwrap_or(0)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.array.read_at(buf, offset).map_err(io_error)
    }

    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        let _gate = self.gate.write();
        self.array.write_at(data, offset, fua).map_err(io_error)
    }

    fn flush(&self) -> io::Result<()> {
        self.array.flush().map_err(io_error)
    }

    fn trim(&self, offset: u64, len_bytes: u64, fua: bool) -> io::Result<()> {
        let _gate = self.gate.write();
        self.array.trim(offset, len_bytes).map_err(io_error)?;
        if fua {
            self.array.flush().map_err(io_error)?;
        }
        Ok(())
    }

    fn write_zeroes(
        &self,
        offset: u64,
        len_bytes: u64,
        fua: bool,
        _may_trim: bool,
    ) -> io::Result<()> {
        let _gate = self.gate.write();
        self.array
            .write_zeroes(offset, len_bytes)
            .map_err(io_error)?;
        if fua {
            self.array.flush().map_err(io_error)?;
        }
        Ok(())
    }
}

/// Logs `array`'s events from number `next` on, waiting up to `wait` for the first; returns
/// the number of the next event to log.
fn log_events(log: &ServerLog, name: &str, array: &Array, next: u64, wait: Duration) -> u64 {
    let (first, events) = array.events_since(next, wait);
    if first > next {
        log.warning(
            "events-missed",
            Some(name),
            &format!(
                "{} events were missed (the array keeps the newest {})",
                first - next,
                raidkit_engine::events::EVENTS_KEPT
            ),
        );
    }
    for event in &events {
        log.array_event(name, event);
    }
    first + events.len() as u64
}

/// Parses `NAME=MEMBER,MEMBER,…`.
fn parse_array_spec(spec: &str) -> Result<(String, Vec<PathBuf>), CliError> {
    let (name, members) = spec
        .split_once('=')
        .ok_or_else(|| CliError::usage(format!("--array {spec}: expected NAME=MEMBER,MEMBER,…")))?;
    if name.is_empty() {
        return Err(CliError::usage(format!(
            "--array {spec}: the export name is empty"
        )));
    }
    let members: Vec<PathBuf> = members
        .split(',')
        .filter(|m| !m.is_empty())
        .map(PathBuf::from)
        .collect();
    if members.is_empty() {
        return Err(CliError::usage(format!("--array {spec}: no members given")));
    }
    Ok((name.to_string(), members))
}

pub fn run(args: ServeArgs) -> Result<(), CliError> {
    // Parse, then act: every flag is checked before a member is opened.
    let mut specs = Vec::new();
    if !args.members.is_empty() {
        specs.push((args.name.clone(), args.members.clone()));
    }
    for spec in &args.array {
        specs.push(parse_array_spec(spec)?);
    }
    for (i, (name, _)) in specs.iter().enumerate() {
        if specs[..i].iter().any(|(n, _)| n == name) {
            return Err(CliError::usage(format!(
                "export name {name} is given twice"
            )));
        }
    }
    if args.socket.is_none() && args.port.is_none() {
        return Err(CliError::usage(
            "say where to listen: --socket PATH or --port N",
        ));
    }
    let control_path = control_path(&args)?;
    let settings = settings(&args)?;
    let log = Arc::new(ServerLog::new(args.log_format));
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mut injections: Vec<(PathBuf, String, FaultSpec)> = Vec::new();
    for item in &args.inject {
        let (member, rules) = item
            .split_once('=')
            .ok_or_else(|| CliError::usage(format!("--inject {item}: expected MEMBER=RULES")))?;
        let spec: FaultSpec = rules
            .parse()
            .map_err(|e| CliError::usage(format!("--inject {item}: {e}")))?;
        let target = canon(Path::new(member));
        if !specs
            .iter()
            .any(|(_, ms)| ms.iter().any(|m| canon(m) == target))
        {
            return Err(CliError::usage(format!(
                "--inject {item}: {member} is not a member of a served array"
            )));
        }
        if injections.iter().any(|(t, _, _)| *t == target) {
            return Err(CliError::usage(format!(
                "--inject: {member} is given twice; put all its rules in one --inject"
            )));
        }
        injections.push((target, rules.to_string(), spec));
    }
    let spare_size = args
        .spare_size
        .as_deref()
        .map(|s| parse_size_bytes(s, 1024))
        .transpose()?;
    if !args.spares.is_empty() && args.read_only {
        return Err(CliError::usage(
            "--spare: read-only arrays are never rebuilt; drop --spare or --read-only",
        ));
    }
    for (i, spare) in args.spares.iter().enumerate() {
        let target = canon(spare);
        if args.spares[..i].iter().any(|p| canon(p) == target) {
            return Err(CliError::usage(format!(
                "--spare {}: given twice",
                spare.display()
            )));
        }
        if specs
            .iter()
            .any(|(_, ms)| ms.iter().any(|m| canon(m) == target))
        {
            return Err(CliError::new(
                ExitCode::Refused,
                format!("--spare {}: is a member of a served array", spare.display()),
            ));
        }
    }
    let spares = Arc::new(GlobalSpares::default());
    for path in &args.spares {
        let disk = open_or_create(path, spare_size).map_err(|e| {
            if e.code == ExitCode::Usage {
                CliError::usage(format!(
                    "--spare {}: does not exist; give --spare-size to create it",
                    path.display()
                ))
            } else {
                e
            }
        })?;
        spares.offer(path, disk)?;
        log.info(
            "server-spare",
            None,
            &format!("global spare {}", path.display()),
        );
    }

    let mut arrays = Vec::new();
    for (name, members) in &specs {
        let (mut disks, mapped) = open_members_mapped(members, args.read_only, !args.no_map)?;
        for p in mapped {
            log.info(
                "member-mapped",
                Some(name),
                &format!(
                    "{}: on tmpfs, fully allocated: mapped into memory",
                    p.display()
                ),
            );
        }
        for (disk, path) in disks.iter_mut().zip(members) {
            let target = canon(path);
            if let Some((_, text, spec)) = injections.iter().find(|(t, _, _)| *t == target) {
                log.warning(
                    "server-inject",
                    Some(name),
                    &format!("injecting faults into {}: {text}", path.display()),
                );
                let inner = std::mem::replace(disk, Box::new(raidkit_disk::MemDisk::new("-", 0)));
                *disk = Box::new(FaultyDisk::new(inner, spec.rules.clone(), spec.seed));
            }
        }
        let (array, report) = Array::assemble(
            disks,
            AssembleOptions {
                force: args.force,
                run: args.run,
                read_only: args.read_only,
                ..Default::default()
            },
        )
        .map_err(|e| assembly_error(e, members))?;
        for (member, why) in &report.excluded {
            log.warning(
                "member-excluded",
                Some(name),
                &format!("{member}: not used: {why}"),
            );
        }
        for note in &report.notes {
            log.info("array-assembled", Some(name), note);
        }
        let array = Arc::new(array);
        // Rebuilds onto spares, resync after an unclean stop and requested checks run in the
        // background while the array is served.
        array.start_background().map_err(engine_error)?;
        for kind in array.pending_tasks() {
            log.info(
                "task-pending",
                Some(name),
                &format!("{kind} pending; it runs in the background"),
            );
        }
        arrays.push((name.clone(), array, Arc::new(WriteGate::default())));
    }

    let listener = match (&args.socket, args.port) {
        (Some(path), _) => {
            Listener::bind_unix_with(path, settings.socket_mode, settings.socket_group)
        }
        (None, Some(port)) => Listener::bind_tcp(SocketAddr::new(args.bind, port)),
        (None, None) => unreachable!("checked above"),
    }
    .map_err(|e| CliError::failure(format!("cannot listen: {e}")))?;

    let control_listener = match &control_path {
        Some(p) => Some(ControlListener::bind(p).map_err(|e| {
            CliError::failure(format!(
                "cannot open the control socket {}: {e}",
                p.display()
            ))
        })?),
        None => None,
    };

    if !args.bind.is_loopback() && args.port.is_some() && settings.tls_mode != TlsMode::Require {
        log.warning(
            "server-insecure",
            None,
            &format!(
                "listening on {} without --tls require: anyone who reaches it can read and write the arrays, in the clear",
                args.bind
            ),
        );
    }
    let observer_log = log.clone();
    let mut builder = Server::builder()
        .threads_per_connection(args.threads as usize)
        .max_connections(args.max_connections as usize)
        .inflight_bytes_per_connection(settings.max_inflight)
        .idle_timeout(args.idle_timeout.map(std::time::Duration::from_secs))
        .tls(settings.tls_mode, settings.tls.clone())
        .observer(Arc::new(move |e: &ServerEvent<'_>| {
            observer_log.server_event(e)
        }));
    for (name, array, gate) in &arrays {
        let export: Arc<dyn Export> = Arc::new(ArrayExport::new(
            array.clone(),
            args.read_only,
            gate.clone(),
        ));
        builder = builder.export(name.clone(), export);
    }
    if let Some((first, _, _)) = arrays.first() {
        builder = builder.default_export(first.clone());
    }
    let server = builder
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the server: {e}")))?;
    let shutdown = raidkit_nbd::shutdown_on_signals()
        .map_err(|e| CliError::failure(format!("cannot install signal handlers: {e}")))?;

    for (name, array, _) in &arrays {
        log.info(
            "server-serving",
            Some(name),
            &format!(
                "serving {} bytes on {}{}",
                array.size_bytes(),
                listener.describe(),
                match settings.tls_mode {
                    TlsMode::Off => "",
                    TlsMode::On => " (TLS offered)",
                    TlsMode::Require => " (TLS required)",
                }
            ),
        );
    }
    if let Some(l) = &control_listener {
        log.info(
            "server-control",
            None,
            &format!("control socket {}", l.path().display()),
        );
    }
    let served: Vec<ServedArray> = arrays
        .iter()
        .map(|(name, array, gate)| ServedArray {
            name: name.clone(),
            array: array.clone(),
            read_only: args.read_only,
            gate: gate.clone(),
            nbd_address: listener.describe(),
        })
        .collect();
    let control = ControlServer::new(served.clone()).with_spares(spares.clone());
    let (report, control_report, logged) = std::thread::scope(|scope| {
        let control_thread = control_listener
            .as_ref()
            .map(|l| scope.spawn(|| control.serve(l, shutdown)));
        if !args.spares.is_empty() {
            let (spares, served, log) = (&spares, &served, &log);
            scope.spawn(move || {
                while !shutdown.load(std::sync::atomic::Ordering::SeqCst) {
                    for line in spares.tend(served) {
                        log.info("spare-taken", None, &line);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            });
        }
        // Every array's events, logged as they happen (from the first: assembly records
        // none, and a task started at once must not be missed).
        let watchers: Vec<_> = arrays
            .iter()
            .map(|(name, array, _)| {
                let log = &log;
                scope.spawn(move || {
                    let mut next = 0;
                    while !shutdown.load(std::sync::atomic::Ordering::SeqCst) {
                        next = log_events(log, name, array, next, Duration::from_millis(200));
                    }
                    next
                })
            })
            .collect();
        let report = server.serve(&listener, shutdown);
        // The NBD server may also end on an error: the control server must end with it.
        shutdown.store(true, std::sync::atomic::Ordering::SeqCst);
        let control_report = control_thread.map(|t| t.join());
        let logged: Vec<u64> = watchers
            .into_iter()
            .map(|w| w.join().unwrap_or(0))
            .collect();
        (report, control_report, logged)
    });
    let report = report.map_err(|e| CliError::failure(format!("server failed: {e}")))?;
    log.info(
        "server-stopping",
        None,
        &format!(
            "shutting down after {} connections ({} refused)",
            report.connections_accepted, report.connections_refused
        ),
    );
    match control_report {
        Some(Ok(c)) => log.info(
            "server-control",
            None,
            &format!(
                "control socket: {} connections, {} requests, {} refused",
                c.connections, c.requests, c.refused
            ),
        ),
        Some(Err(_)) => log.warning(
            "server-control",
            None,
            "the control server ended abnormally",
        ),
        None => {}
    }

    let mut failed = Vec::new();
    for (name, err) in &report.flush_failures {
        failed.push(format!("{name}: flush failed: {err}"));
    }
    for ((name, array, _), next) in arrays.iter().zip(logged) {
        let stopped = if args.read_only || report.flush_failures.iter().any(|(n, _)| n == name) {
            // Not flushed: left marked dirty so the next assembly resyncs.
            None
        } else {
            Some(array.stop())
        };
        // What stopping did (a task stopped at its checkpoint), then how it ended.
        log_events(&log, name, array, next, Duration::ZERO);
        match stopped {
            Some(Err(e)) => failed.push(format!("{name}: stop failed: {e}")),
            Some(Ok(())) => log.info("array-stopped", Some(name), "flushed and marked clean"),
            None => {}
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(ExitCode::Failure, failed.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_spec_parses_name_and_members() {
        let (name, members) = parse_array_spec("md1=a.img,b.img").unwrap();
        assert_eq!(name, "md1");
        assert_eq!(
            members,
            vec![PathBuf::from("a.img"), PathBuf::from("b.img")]
        );
    }

    /// A minimal NBD client over a unix socket: fixed newstyle, NBD_OPT_GO, simple replies.
    struct Client(std::os::unix::net::UnixStream);

    impl Client {
        fn connect(socket: &std::path::Path, export: &str) -> (Client, u16) {
            use std::io::{Read, Write};
            let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            let mut greeting = [0u8; 18];
            s.read_exact(&mut greeting).unwrap();
            assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
            s.write_all(&3u32.to_be_bytes()).unwrap(); // FIXED_NEWSTYLE | NO_ZEROES
            let mut data = (export.len() as u32).to_be_bytes().to_vec();
            data.extend_from_slice(export.as_bytes());
            // One information request: NBD_INFO_BLOCK_SIZE (the server requires it).
            data.extend_from_slice(&1u16.to_be_bytes());
            data.extend_from_slice(&3u16.to_be_bytes());
            let mut opt = b"IHAVEOPT".to_vec();
            opt.extend_from_slice(&7u32.to_be_bytes()); // NBD_OPT_GO
            opt.extend_from_slice(&(data.len() as u32).to_be_bytes());
            opt.extend_from_slice(&data);
            s.write_all(&opt).unwrap();
            let mut flags = None;
            loop {
                let mut h = [0u8; 20];
                s.read_exact(&mut h).unwrap();
                let typ = u32::from_be_bytes(h[12..16].try_into().unwrap());
                let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
                let mut d = vec![0u8; len];
                s.read_exact(&mut d).unwrap();
                match typ {
                    1 => break, // NBD_REP_ACK
                    3 if d[..2] == [0, 0] => flags = Some(u16::from_be_bytes([d[10], d[11]])),
                    3 => {}
                    other => panic!("NBD_OPT_GO refused: reply type {other:#x}"),
                }
            }
            (Client(s), flags.expect("NBD_INFO_EXPORT"))
        }

        /// Sends one request (with `payload` for a write) and waits for its simple reply;
        /// returns the error value.
        fn call(
            &mut self,
            command: u16,
            cookie: u64,
            offset: u64,
            len: u32,
            payload: &[u8],
        ) -> u32 {
            use std::io::{Read, Write};
            let mut v = 0x2560_9513u32.to_be_bytes().to_vec();
            v.extend_from_slice(&0u16.to_be_bytes());
            v.extend_from_slice(&command.to_be_bytes());
            v.extend_from_slice(&cookie.to_be_bytes());
            v.extend_from_slice(&offset.to_be_bytes());
            v.extend_from_slice(&len.to_be_bytes());
            v.extend_from_slice(payload);
            self.0.write_all(&v).unwrap();
            let mut h = [0u8; 16];
            self.0.read_exact(&mut h).unwrap();
            assert_eq!(u32::from_be_bytes(h[..4].try_into().unwrap()), 0x6744_6698);
            assert_eq!(u64::from_be_bytes(h[8..].try_into().unwrap()), cookie);
            u32::from_be_bytes(h[4..8].try_into().unwrap())
        }
    }

    /// What an array assembled from the members' durable bytes (what a power loss would
    /// leave) holds at `offset`.
    fn durable_contents(disks: &[raidkit_sim::SimDisk], offset: u64, len: usize) -> Vec<u8> {
        let members: Vec<Box<dyn raidkit_disk::Disk>> = disks
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let image = d.durable_image();
                let m = raidkit_disk::MemDisk::new(&format!("durable{i}"), image.len() as u64);
                raidkit_disk::Disk::write_at(&m, &image, 0).unwrap();
                Box::new(m) as Box<dyn raidkit_disk::Disk>
            })
            .collect();
        let (array, _) = Array::assemble(
            members,
            AssembleOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut out = vec![0u8; len];
        array.read_at(&mut out, offset).unwrap();
        out
    }

    /// NBD_FLAG_CAN_MULTI_CONN promises that a flush on one connection covers writes another
    /// connection has seen replies for. Members are simulated disks whose completed writes sit
    /// in a volatile cache until flushed, so the test sees exactly what a flush made durable.
    #[test]
    fn flush_on_one_connection_covers_writes_from_another() {
        const WRITE: u16 = 1;
        const FLUSH: u16 = 3;
        const CAN_MULTI_CONN: u16 = 1 << 8;
        const SEND_FLUSH: u16 = 1 << 2;
        let disks: Vec<raidkit_sim::SimDisk> = (0..4)
            .map(|i| raidkit_sim::SimDisk::new(&format!("sim{i}"), 8 << 20, i))
            .collect();
        let array = Array::create(
            disks
                .iter()
                .map(|d| Box::new(d.clone()) as Box<dyn raidkit_disk::Disk>)
                .collect(),
            raidkit_engine::CreateOptions {
                level: 5,
                layout: None,
                chunk_sectors: 128,
                raid_devices: 4,
                metadata: raidkit_metadata::SuperblockVersion::V1_2,
                size_sectors: None,
                name: "multi-conn".into(),
                set_uuid: [7; 16],
                device_uuids: (0..4u8).map(|i| [i + 1; 16]).collect(),
                ctime_seconds: 0,
                members_zeroed: true,
                consistency: raidkit_engine::ConsistencyPolicy::Resync,
                config: Default::default(),
            },
        )
        .unwrap();
        let array = Arc::new(array);
        let dir = std::env::temp_dir().join(format!("raidkit-multi-conn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("nbd.sock");
        let listener = Listener::bind_unix(&socket).unwrap();
        let server = Server::builder()
            .export(
                "md",
                Arc::new(ArrayExport::new(array.clone(), false, Default::default()))
                    as Arc<dyn Export>,
            )
            .build()
            .unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        /// Stops the server however the test ends, so a failed assertion cannot hang it.
        struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        std::thread::scope(|scope| {
            let served = scope.spawn(|| server.serve(&listener, &stop).unwrap());
            let stopper = StopOnDrop(&stop);
            let (mut a, flags) = Client::connect(&socket, "md");
            let (mut b, _) = Client::connect(&socket, "md");
            assert_ne!(flags & CAN_MULTI_CONN, 0, "arrays advertise CAN_MULTI_CONN");
            assert_ne!(flags & SEND_FLUSH, 0);

            // Three chunks' worth from a chunk boundary minus a bit: data and parity of two
            // stripes change.
            let offset = 3 * 65536 - 4096;
            let data: Vec<u8> = (0..3 * 65536u32).map(|i| (i % 251) as u8 ^ 0x5a).collect();
            assert_eq!(a.call(WRITE, 1, offset, data.len() as u32, &data), 0);
            // Completed but not yet flushed: a power loss now could lose it.
            assert!(
                durable_contents(&disks, offset, data.len()) != data,
                "the write is already durable without a flush; the test would prove nothing"
            );

            assert_eq!(b.call(FLUSH, 2, 0, 0, &[]), 0);
            assert!(
                durable_contents(&disks, offset, data.len()) == data,
                "a flush on connection B did not make connection A's completed write durable"
            );
            for d in &disks {
                assert!(
                    d.durable_image() == d.peek_live(0, 8 << 20),
                    "{}: writes left in the volatile cache after the flush",
                    raidkit_disk::Disk::name(d)
                );
            }
            drop((a, b, stopper));
            let report = served.join().unwrap();
            assert!(report.all_flushed());
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn array_spec_without_members_is_refused() {
        assert!(parse_array_spec("md1=").is_err());
        assert!(parse_array_spec("md1").is_err());
        assert!(parse_array_spec("=a.img").is_err());
    }
}
