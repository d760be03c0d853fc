//! The server behind `raidkit serve`: arrays exported over NBD, a control socket that manages
//! them, a pool of global hot spares, and a log of everything that happens.
//!
//! Owns serving: [`assemble_served`] makes an array ready to serve (members opened, faults
//! injected where asked, assembled, background work started), and [`Serving::run`] serves a
//! set of them until SIGINT/SIGTERM (the `shutdown` flag): it stops accepting, lets in-flight
//! requests finish, flushes every export, waits for control requests in progress (a rebuild
//! onto an added member), and then stops every array, which marks it clean in its superblocks.
//! The binary's `cmd/serve.rs` only turns flags into these values.
//!
//! - [`export`]: an array as an NBD export, and the gate that keeps writes apart from a
//!   membership change;
//! - [`control`]: the control socket's server and its client (`raidkit detail|fail|remove|add
//!   --control PATH`);
//! - [`spares`]: global hot spares, handed to whichever served array needs one;
//! - [`log`]: the server's log lines, as text or JSON.
//!
//! Imports go one way: `control` uses `export` and `spares`, `spares` uses `export`, and this
//! module uses all four.

pub mod control;
pub mod export;
pub mod health;
pub mod log;
pub mod reshape;
pub mod schedule;
pub mod spares;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use raidkit_engine::{Array, AssembleOptions};
use raidkit_nbd::{Export, Listener, Server, ServerEvent, TlsConfig, TlsMode};
use raidkit_sim::{FaultSpec, FaultyDisk};

use crate::common::{assembly_error, engine_error, open_members_mapped};
use crate::error::{CliError, ExitCode};
use control::{ControlListener, ControlServer};
use export::{ArrayExport, ArraySlot, Backend, ServedArray, WriteGate};
use log::ServerLog;
use spares::GlobalSpares;

/// Faults to inject into one member: its canonical path, the rules as given (for the log),
/// and the parsed rules.
pub struct Injection {
    pub member: PathBuf,
    pub text: String,
    pub spec: FaultSpec,
}

/// Opens `members` (mapping fully allocated tmpfs images when `map_memory`), wraps those
/// named in `injections` in a fault-injecting disk, assembles the array and starts its
/// background work (rebuilds onto spares, resync after an unclean stop), logging each step
/// under `name`.
pub fn assemble_served(
    name: &str,
    members: &[PathBuf],
    options: AssembleOptions,
    map_memory: bool,
    injections: &[Injection],
    log: &ServerLog,
) -> Result<Backend, CliError> {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (mut disks, mapped) = open_members_mapped(members, options.read_only, map_memory)?;
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
        if let Some(inject) = injections.iter().find(|i| i.member == target) {
            log.warning(
                "server-inject",
                Some(name),
                &format!("injecting faults into {}: {}", path.display(), inject.text),
            );
            let inner = std::mem::replace(disk, Box::new(raidkit_disk::MemDisk::new("-", 0)));
            *disk = Box::new(FaultyDisk::new(
                inner,
                inject.spec.rules.clone(),
                inject.spec.seed,
            ));
        }
    }
    // A RAID 50/60 stack is served as one export: the RAID 0 over its spans.
    let assembled = if crate::common::stack_level_of(&disks).is_some() {
        Array::assemble_stack(disks, options.clone())
    } else {
        Array::assemble(disks, options.clone())
    };
    let (array, report) = match assembled {
        Ok(a) => a,
        Err(raidkit_engine::EngineError::ReshapeInProgress {
            position_sectors, ..
        }) if !options.read_only => {
            // A reshape the members record (a server stopped mid-reshape, a crash, md): it
            // goes on online.
            let disks: Vec<Arc<dyn raidkit_disk::Disk>> =
                open_members_mapped(members, false, false)?
                    .0
                    .into_iter()
                    .map(Arc::from)
                    .collect();
            let online = raidkit_engine::OnlineReshape::resume(disks, options, reshape::STEP_BYTES)
                .map_err(|e| assembly_error(e, members))?;
            log.info(
                "reshape-resumed",
                Some(name),
                &format!(
                    "a reshape is recorded at array sector {position_sectors}; it goes on online"
                ),
            );
            return Ok(Backend::Reshaping(Arc::new(online)));
        }
        Err(e) => return Err(assembly_error(e, members)),
    };
    for (member, why) in &report.excluded {
        log.warning(
            "member-excluded",
            Some(name),
            &format!("{member}: not used: {why}"),
        );
    }
    // What else assembly found (`report.events`) is in the array's event log, which
    // `Serving::run` logs from its first event.
    let array = Arc::new(array);
    // Rebuilds onto spares, resync after an unclean stop and requested checks run in the
    // background while the array is served (a stack's in its spans).
    array.start_background().map_err(engine_error)?;
    for span in array.spans() {
        span.start_background().map_err(engine_error)?;
    }
    for kind in array.pending_tasks() {
        log.info(
            "task-pending",
            Some(name),
            &format!("{kind} pending; it runs in the background"),
        );
    }
    Ok(Backend::Array(array))
}

/// How the NBD side serves, from the binary's flags.
pub struct NbdSettings {
    pub threads_per_connection: usize,
    pub max_connections: usize,
    pub inflight_bytes_per_connection: u64,
    pub idle_timeout: Option<Duration>,
    pub tls_mode: TlsMode,
    pub tls: Option<Arc<TlsConfig>>,
}

/// Everything a running server needs; [`Serving::run`] serves it until shutdown.
pub struct Serving {
    /// Export name and array, in the order given (the first is the default export, and gets
    /// a global spare first).
    pub arrays: Vec<(String, Backend)>,
    pub read_only: bool,
    pub nbd: NbdSettings,
    pub listener: Listener,
    pub control: Option<ControlListener>,
    pub spares: Arc<GlobalSpares>,
    pub log: Arc<ServerLog>,
    /// Export name -> spare group (`serve --scan`'s `spare-group=`).
    pub spare_groups: std::collections::HashMap<String, String>,
    /// Maintenance started on a schedule (`--schedule`), and the file keeping when each
    /// task last started.
    pub schedules: Vec<schedule::Schedule>,
    pub schedule_state: Option<PathBuf>,
    /// How often the members' drives are asked for their health, and what is a warning.
    pub health: health::HealthWatch,
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

impl Serving {
    /// Serves until `shutdown` is set (by SIGINT/SIGTERM) or the NBD server fails, then stops
    /// every array. An error names each array that could not be flushed or stopped.
    pub fn run(self, shutdown: &AtomicBool) -> Result<(), CliError> {
        let Serving {
            arrays,
            read_only,
            nbd,
            listener,
            control: control_listener,
            spares,
            log,
            spare_groups,
            schedules,
            schedule_state,
            health,
        } = self;
        let arrays: Vec<(String, Arc<ArraySlot>, Arc<WriteGate>)> = arrays
            .into_iter()
            .map(|(name, backend)| {
                (
                    name,
                    ArraySlot::new(backend),
                    Arc::new(WriteGate::default()),
                )
            })
            .collect();
        let observer_log = log.clone();
        let mut builder = Server::builder()
            .threads_per_connection(nbd.threads_per_connection)
            .max_connections(nbd.max_connections)
            .inflight_bytes_per_connection(nbd.inflight_bytes_per_connection)
            .idle_timeout(nbd.idle_timeout)
            .tls(nbd.tls_mode, nbd.tls.clone())
            .observer(Arc::new(move |e: &ServerEvent<'_>| {
                observer_log.server_event(e)
            }));
        for (name, slot, gate) in &arrays {
            let export: Arc<dyn Export> =
                Arc::new(ArrayExport::new(slot.clone(), read_only, gate.clone()));
            builder = builder.export(name.clone(), export);
        }
        if let Some((first, _, _)) = arrays.first() {
            builder = builder.default_export(first.clone());
        }
        let server = builder
            .build()
            .map_err(|e| CliError::failure(format!("cannot start the server: {e}")))?;

        for (name, slot, _) in &arrays {
            let size = match slot.get() {
                Backend::Array(a) => a.size_bytes(),
                Backend::Reshaping(r) => r.size_bytes(),
            };
            log.info(
                "server-serving",
                Some(name),
                &format!(
                    "serving {} bytes on {}{}",
                    size,
                    listener.describe(),
                    match nbd.tls_mode {
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
            .map(|(name, slot, gate)| ServedArray {
                name: name.clone(),
                slot: slot.clone(),
                read_only,
                gate: gate.clone(),
                nbd_address: listener.describe(),
                spare_group: spare_groups.get(name).cloned(),
            })
            .collect();
        // Every spare is offered before serving starts: an empty pool stays empty.
        let tend_spares = !spares.waiting().is_empty() || !spare_groups.is_empty();
        let control = ControlServer::new(served.clone())
            .with_spares(spares.clone())
            .with_log(log.clone());
        let (report, control_report, logged) = std::thread::scope(|scope| {
            let control_thread = control_listener
                .as_ref()
                .map(|l| scope.spawn(|| control.serve(l, shutdown)));
            if tend_spares {
                let (spares, served, log) = (&spares, &served, &log);
                scope.spawn(move || {
                    while !shutdown.load(Ordering::SeqCst) {
                        for line in spares.tend(served) {
                            log.info("spare-taken", None, &line);
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                });
            }
            if let (false, Some(state)) = (schedules.is_empty(), &schedule_state) {
                let (schedules, served, log) = (&schedules, &served, &log);
                scope.spawn(move || schedule::run(schedules, state, served, log, shutdown));
            }
            if health.every.is_some() {
                let (health, served) = (&health, &served);
                scope.spawn(move || health::run(health, served, shutdown));
            }
            // A reshape found recorded at start goes on.
            for (name, slot, _) in &arrays {
                if let Backend::Reshaping(online) = slot.get() {
                    let log = &log;
                    scope.spawn(move || reshape::drive(name, slot, &online, log));
                }
            }
            // Every array's events, logged as they happen (from the first: what assembly found
            // is logged so, and a task started at once must not be missed). An array assembled
            // again (after an online reshape) is logged from its first event.
            let watchers: Vec<_> = arrays
                .iter()
                .map(|(name, slot, _)| {
                    let log = &log;
                    scope.spawn(move || {
                        let mut next = 0;
                        let mut current: Option<Arc<Array>> = None;
                        // A RAID 50/60 stack's spans have events of their own (a member
                        // failed, a rebuild): logged as "NAME/span I".
                        let mut span_next: Vec<u64> = Vec::new();
                        let span_names: Vec<String> = match slot.get() {
                            Backend::Array(a) => (0..a.spans().len())
                                .map(|i| format!("{name}/span{i}"))
                                .collect(),
                            Backend::Reshaping(_) => Vec::new(),
                        };
                        while !shutdown.load(Ordering::SeqCst) {
                            let Backend::Array(array) = slot.get() else {
                                std::thread::sleep(Duration::from_millis(200));
                                continue;
                            };
                            if !current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &array)) {
                                next = 0;
                                span_next = vec![0; array.spans().len()];
                                current = Some(array.clone());
                            }
                            next = log_events(log, name, &array, next, Duration::from_millis(200));
                            for ((span, at), span_name) in
                                array.spans().iter().zip(&mut span_next).zip(&span_names)
                            {
                                *at = log_events(log, span_name, span, *at, Duration::ZERO);
                            }
                        }
                        next
                    })
                })
                .collect();
            let report = server.serve(&listener, shutdown);
            // The NBD server may also end on an error: the control server must end with it.
            shutdown.store(true, Ordering::SeqCst);
            for (_, slot, _) in &arrays {
                slot.stopping.store(true, Ordering::SeqCst);
            }
            // An online reshape stops at the end of its step (recorded there).
            for (_, slot, _) in &arrays {
                while slot.driving.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
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
        for ((name, slot, _), next) in arrays.iter().zip(logged) {
            // Waits for a reshape step in progress (it holds the slot).
            let array = match slot.get() {
                Backend::Array(a) => a,
                Backend::Reshaping(r) => {
                    match r.flush() {
                        Ok(()) => log.info(
                            "array-stopped",
                            Some(name),
                            "flushed; its reshape is recorded and goes on when it is served again",
                        ),
                        Err(e) => failed.push(format!("{name}: flush failed: {e}")),
                    }
                    continue;
                }
            };
            let array = &array;
            let stopped = if read_only || report.flush_failures.iter().any(|(n, _)| n == name) {
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
}
