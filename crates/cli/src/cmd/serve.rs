//! `raidkit serve`: export arrays as Network Block Device disks.
//!
//! Owns the flags of `raidkit serve` and their checks (parse, then act: every flag is checked
//! before a member is opened), and the wiring: global spares opened and offered, each array
//! assembled ([`raidkit_cli::server::assemble_served`]), the NBD and control sockets bound,
//! signal handlers installed, and then [`raidkit_cli::server::Serving::run`] serves until
//! SIGINT or SIGTERM. What serving means (the export, the control socket, the spare pool, the
//! log, the orderly shutdown) lives in the library's `server` module.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use raidkit_cli::common::{open_or_create, parse_size_bytes, RUN_HELP};
use raidkit_cli::server::control::ControlListener;
use raidkit_cli::server::log::{LogFormat, ServerLog};
use raidkit_cli::server::spares::GlobalSpares;
use raidkit_cli::server::{assemble_served, Injection, NbdSettings, Serving};
use raidkit_cli::{CliError, ExitCode};
use raidkit_engine::AssembleOptions;
use raidkit_nbd::{Listener, TlsConfig, TlsMode};
use raidkit_sim::FaultSpec;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Members of the array to export (image files or block devices). Image files on tmpfs
    /// with every page allocated (`fallocate -l SIZE FILE`) are mapped into memory, which
    /// makes their I/O a memory copy, about 1.5 times as fast (see --no-map).
    #[arg(required_unless_present_any = ["array", "scan"])]
    pub members: Vec<PathBuf>,
    /// Serve every array the configuration file names (its ARRAY lines; members found by
    /// UUID among its DEVICE candidates, see `raidkit scan`).
    #[arg(long)]
    pub scan: bool,
    /// The configuration file --scan reads.
    #[arg(long, value_name = "PATH", default_value = raidkit_cli::config::DEFAULT_CONFIG, requires = "scan")]
    pub config: PathBuf,
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
    /// Start maintenance on a schedule: TASK=WHEN[+BUDGET][,...] with tasks check, repair
    /// and patrol; WHEN an interval (7d, 12h, 90s: once that long has passed since it last
    /// started) or DAY@HH:MM in local time with DAY daily, a weekday or first-WEEKDAY;
    /// BUDGET how long one run may take before it stops, the next window (the interval, or
    /// the next night at HH:MM) continuing where it stopped. md's mdcheck default is
    /// `check=first-sunday@01:00+6h`; a controller's patrol read `patrol=7d`. Runs queue
    /// behind a running task and go at the task rates.
    #[arg(long, value_name = "TASK=WHEN[+BUDGET],...")]
    pub schedule: Option<String>,
    /// Where the schedule keeps when each task last started (JSON) [default: the control
    /// socket's path with ".schedule" appended].
    #[arg(long = "schedule-state", value_name = "PATH", requires = "schedule")]
    pub schedule_state: Option<PathBuf>,
    /// Ask the members' drives for their health (SMART: smartctl for block devices; an
    /// emulated drive's report) at start and every so often, and log a drive-health-warning
    /// when one reports trouble: `every=30m,reallocated=10,pending=1,uncorrectable=1,
    /// temperature=60` (the defaults; give any subset), or `off`.
    #[arg(long, value_name = "SETTINGS")]
    pub health: Option<String>,
    /// The read policy of every array served: none (md's), always or adaptive (the PERC6's
    /// NORA, RA, ARA); an ARRAY line's `read-ahead=` sets one array's with --scan, `raidkit
    /// task read-ahead` changes it while serving.
    #[arg(long = "read-ahead", value_name = "POLICY", value_parser = parse_read_ahead)]
    pub read_ahead: Option<raidkit_engine::ReadAhead>,

    /// Write policy of the served arrays: through (the default: a write returns once the
    /// members have it) or back (md's journal_mode write-back, the PERC6's WB: a write returns
    /// once the write journal has it, and a bounded cache writes the members behind it; needs
    /// an array created with --write-journal). An ARRAY line's `write-policy=` sets one
    /// array's with --scan; `raidkit task write-policy` changes it while serving.
    #[arg(long = "write-policy", value_name = "POLICY", value_parser = parse_write_policy)]
    pub write_policy: Option<raidkit_engine::WritePolicy>,
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
    let mut spare_groups = std::collections::HashMap::new();
    // The configuration's read-ahead= and write-policy= per array, over --read-ahead and
    // --write-policy.
    let mut read_ahead = std::collections::HashMap::new();
    let mut write_policy = std::collections::HashMap::new();
    // The configuration's SCHEDULE, unless --schedule says otherwise.
    let mut schedule_text = args.schedule.clone();
    // The configuration's RATES, given to every array it serves.
    let mut rates = raidkit_cli::config::RatesSpec::default();
    // The configuration's HEALTH, unless --health says otherwise.
    let mut health = match &args.health {
        Some(text) => Some(raidkit_cli::server::health::HealthWatch::parse(text)?),
        None => None,
    };
    if args.scan {
        let cfg = raidkit_cli::config::Config::load(&args.config)?;
        rates = cfg.rates;
        health = health.or(cfg.health);
        if schedule_text.is_none() && !cfg.schedule.is_empty() {
            schedule_text = Some(cfg.schedule.join(","));
        }
        if cfg.arrays.is_empty() {
            return Err(CliError::usage(format!(
                "{}: no ARRAY line (`raidkit scan` prints them)",
                args.config.display()
            )));
        }
        for a in &cfg.arrays {
            specs.push((a.name.clone(), cfg.members_of(a)?));
            if let Some(g) = &a.spare_group {
                spare_groups.insert(a.name.clone(), g.clone());
            }
            read_ahead.insert(a.name.clone(), a.read_ahead);
            write_policy.insert(a.name.clone(), a.write_policy);
        }
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
    let schedules = match &schedule_text {
        Some(text) => raidkit_cli::server::schedule::parse_schedules(text)?,
        None => Vec::new(),
    };
    let schedule_state = match (&args.schedule_state, &control_path) {
        (Some(p), _) => Some(p.clone()),
        _ if schedules.is_empty() => None,
        (None, Some(c)) => {
            let mut p = c.clone().into_os_string();
            p.push(".schedule");
            Some(PathBuf::from(p))
        }
        (None, None) => {
            return Err(CliError::usage(
                "--schedule without a control socket needs --schedule-state PATH (where it keeps when each task last started)",
            ))
        }
    };
    let settings = settings(&args)?;
    let log = Arc::new(ServerLog::new(args.log_format));
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mut injections: Vec<Injection> = Vec::new();
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
        if injections.iter().any(|i| i.member == target) {
            return Err(CliError::usage(format!(
                "--inject: {member} is given twice; put all its rules in one --inject"
            )));
        }
        injections.push(Injection {
            member: target,
            text: rules.to_string(),
            spec,
        });
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
        let options = AssembleOptions {
            force: args.force,
            run: args.run,
            read_only: args.read_only,
            ..Default::default()
        };
        let array = assemble_served(name, members, options, !args.no_map, &injections, &log)?;
        if let raidkit_cli::server::export::Backend::Array(a) = &array {
            a.set_task_rates(rates.apply(a.task_rates())?);
            if let Some(p) = read_ahead.get(name).copied().flatten().or(args.read_ahead) {
                a.set_read_ahead(p);
            }
            if let Some(p) = write_policy
                .get(name)
                .copied()
                .flatten()
                .or(args.write_policy)
            {
                a.set_write_policy(p)
                    .map_err(|e| CliError::usage(format!("{name}: write policy {p}: {e}")))?;
                if p == raidkit_engine::WritePolicy::Back {
                    a.start_destaging();
                }
            }
        }
        arrays.push((name.clone(), array));
    }

    let listener = match (&args.socket, args.port) {
        (Some(path), _) => {
            Listener::bind_unix_with(path, settings.socket_mode, settings.socket_group)
        }
        (None, Some(port)) => Listener::bind_tcp(SocketAddr::new(args.bind, port)),
        (None, None) => unreachable!("checked above"),
    }
    .map_err(|e| CliError::failure(format!("cannot listen: {e}")))?;

    let control = match &control_path {
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
    let shutdown = raidkit_nbd::shutdown_on_signals()
        .map_err(|e| CliError::failure(format!("cannot install signal handlers: {e}")))?;
    Serving {
        arrays,
        read_only: args.read_only,
        nbd: NbdSettings {
            threads_per_connection: args.threads as usize,
            max_connections: args.max_connections as usize,
            inflight_bytes_per_connection: settings.max_inflight,
            idle_timeout: args.idle_timeout.map(Duration::from_secs),
            tls_mode: settings.tls_mode,
            tls: settings.tls,
        },
        listener,
        control,
        spares,
        log,
        spare_groups,
        schedules,
        schedule_state,
        health: health.unwrap_or_default(),
    }
    .run(shutdown)
}

fn parse_write_policy(text: &str) -> Result<raidkit_engine::WritePolicy, String> {
    raidkit_engine::WritePolicy::parse(text)
        .ok_or_else(|| format!("{text}: through or back (wt, wb)"))
}

fn parse_read_ahead(text: &str) -> Result<raidkit_engine::ReadAhead, String> {
    raidkit_engine::ReadAhead::parse(text)
        .ok_or_else(|| format!("{text}: none, always or adaptive (nora, ra, ara)"))
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

    #[test]
    fn array_spec_without_members_is_refused() {
        assert!(parse_array_spec("md1=").is_err());
        assert!(parse_array_spec("md1").is_err());
        assert!(parse_array_spec("=a.img").is_err());
    }
}
