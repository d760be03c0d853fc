//! A small NBD server for manual and script-level tests (tests/nbd/e2e.sh):
//!
//! ```text
//! serve (--socket PATH | --tcp ADDR) [--threads N] [--read-only]
//!       [--tls on|require --tls-cert PEM --tls-key PEM [--tls-client-ca PEM]]
//!       [--idle-timeout-s N] [--log] (--memory NAME=SIZE | --file NAME=PATH)...
//! ```
//!
//! `--log` prints the server's events (accepted, refused with the reason, negotiated,
//! closed) on stderr, the way `raidkit serve` may.
//!
//! SIZE takes K, M, G suffixes (powers of two). Runs until SIGINT or SIGTERM, then flushes
//! every export and exits 0 (1 if a flush failed, 2 on bad arguments).

use raidkit_nbd::{
    Export, FileExport, Listener, MemoryExport, Server, ServerEvent, TlsConfig, TlsMode,
};
use std::path::PathBuf;
use std::sync::Arc;

fn parse_size(s: &str) -> Option<u64> {
    let (digits, shift) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 10),
        'M' | 'm' => (&s[..s.len() - 1], 20),
        'G' | 'g' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

fn usage(message: &str) -> ! {
    eprintln!("serve: {message}");
    eprintln!("usage: serve (--socket PATH | --tcp ADDR) [--threads N] [--read-only] [--tls on|require --tls-cert PEM --tls-key PEM [--tls-client-ca PEM]] [--idle-timeout-s N] [--log] (--memory NAME=SIZE | --file NAME=PATH)...");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut listener = None;
    let mut read_only = false;
    let mut threads = None;
    let mut tls_mode = TlsMode::Off;
    let (mut tls_cert, mut tls_key, mut tls_ca) = (None, None, None);
    let mut idle_timeout = None;
    let mut log = false;
    let mut exports: Vec<(String, Arc<dyn Export>)> = Vec::new();
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--socket" => {
                let path = PathBuf::from(value());
                listener =
                    Some(Listener::bind_unix(&path).unwrap_or_else(|e| usage(&e.to_string())));
            }
            "--tcp" => {
                let addr = value()
                    .parse()
                    .unwrap_or_else(|_| usage("bad --tcp address"));
                listener = Some(Listener::bind_tcp(addr).unwrap_or_else(|e| usage(&e.to_string())));
            }
            "--threads" => {
                threads = Some(value().parse().unwrap_or_else(|_| usage("bad --threads")))
            }
            "--read-only" => read_only = true,
            "--tls" => {
                tls_mode = match value().as_str() {
                    "on" => TlsMode::On,
                    "require" => TlsMode::Require,
                    "off" => TlsMode::Off,
                    _ => usage("--tls takes on, require or off"),
                }
            }
            "--tls-cert" => tls_cert = Some(PathBuf::from(value())),
            "--tls-key" => tls_key = Some(PathBuf::from(value())),
            "--tls-client-ca" => tls_ca = Some(PathBuf::from(value())),
            "--idle-timeout-s" => {
                let s: u64 = value()
                    .parse()
                    .unwrap_or_else(|_| usage("bad --idle-timeout-s"));
                idle_timeout = Some(std::time::Duration::from_secs(s));
            }
            "--log" => log = true,
            "--memory" => {
                let v = value();
                let (name, size) = v
                    .split_once('=')
                    .unwrap_or_else(|| usage("--memory NAME=SIZE"));
                let size = parse_size(size).unwrap_or_else(|| usage("bad SIZE"));
                let export = MemoryExport::new(size).with_read_only(read_only);
                exports.push((name.to_string(), Arc::new(export)));
            }
            "--file" => {
                let v = value();
                let (name, path) = v
                    .split_once('=')
                    .unwrap_or_else(|| usage("--file NAME=PATH"));
                let export = FileExport::open(path.as_ref(), read_only)
                    .unwrap_or_else(|e| usage(&format!("{path}: {e}")));
                exports.push((name.to_string(), Arc::new(export)));
            }
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let listener = listener.unwrap_or_else(|| usage("--socket or --tcp is required"));
    let mut builder = Server::builder();
    for (name, export) in exports {
        builder = builder.export(name, export);
    }
    if let Some(n) = threads {
        builder = builder.threads_per_connection(n);
    }
    if let (Some(cert), Some(key)) = (&tls_cert, &tls_key) {
        let config = TlsConfig::from_pem_files(cert, key, tls_ca.as_deref())
            .unwrap_or_else(|e| usage(&e.to_string()));
        builder = builder.tls(tls_mode, Some(Arc::new(config)));
    } else {
        builder = builder.tls(tls_mode, None);
    }
    builder = builder.idle_timeout(idle_timeout);
    if log {
        builder = builder.observer(Arc::new(|e: &ServerEvent<'_>| match e {
            ServerEvent::Accepted { connection, peer } => {
                eprintln!("serve: connection {connection} from {peer}")
            }
            ServerEvent::Refused {
                connection,
                peer,
                reason,
            } => match connection {
                Some(c) => eprintln!("serve: connection {c} from {peer} refused: {reason}"),
                None => eprintln!("serve: connection from {peer} refused: {reason}"),
            },
            ServerEvent::Negotiated {
                connection,
                export,
                tls,
                ..
            } => {
                let tls = if *tls { " over TLS" } else { "" };
                eprintln!("serve: connection {connection} uses export {export}{tls}")
            }
            ServerEvent::Throttled {
                connection,
                inflight_bytes_limit,
            } => eprintln!(
                "serve: connection {connection} waits for its {inflight_bytes_limit}-byte in-flight limit"
            ),
            ServerEvent::Closed { connection, end } => {
                eprintln!("serve: connection {connection} {end}")
            }
        }));
    }
    let server = builder.build().unwrap_or_else(|e| usage(&e.to_string()));
    let shutdown = raidkit_nbd::shutdown_on_signals().unwrap_or_else(|e| usage(&e.to_string()));
    match server.serve(&listener, shutdown) {
        Ok(report) if report.all_flushed() => {}
        Ok(report) => {
            for (name, e) in report.flush_failures {
                eprintln!("serve: flushing {name}: {e}");
            }
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("serve: {e}");
            std::process::exit(1);
        }
    }
}
