//! A small NBD server for manual and script-level tests (tests/nbd/e2e.sh):
//!
//! ```text
//! serve (--socket PATH | --tcp ADDR) [--threads N] [--read-only] (--memory NAME=SIZE | --file NAME=PATH)...
//! ```
//!
//! SIZE takes K, M, G suffixes (powers of two). Runs until SIGINT or SIGTERM, then flushes
//! every export and exits 0 (1 if a flush failed, 2 on bad arguments).

use raidkit_nbd::{Export, FileExport, Listener, MemoryExport, Server};
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
    eprintln!("usage: serve (--socket PATH | --tcp ADDR) [--threads N] [--read-only] (--memory NAME=SIZE | --file NAME=PATH)...");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut listener = None;
    let mut read_only = false;
    let mut threads = None;
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
