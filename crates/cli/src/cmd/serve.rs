//! `raidkit serve`: export arrays as Network Block Device disks.
//!
//! Each array is assembled from its member files, wrapped in [`ArrayExport`] (the NBD server's
//! view of an array: it only moves bytes and declares capabilities), and served on a unix socket
//! or on TCP bound to loopback unless `--bind` says otherwise. On SIGINT or SIGTERM the server
//! stops accepting, lets in-flight requests finish, flushes every export, and then every array is
//! stopped, which marks it clean in its superblocks.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use raidkit_engine::{Array, AssembleOptions, EngineError};
use raidkit_nbd::{BlockSize, Export, Listener, Server};

use super::array::{engine_error, open_members};
use crate::{CliError, ExitCode};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Members of the array to export (image files or block devices).
    #[arg(required_unless_present = "array")]
    pub members: Vec<PathBuf>,
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
}

/// An array as an NBD export.
pub struct ArrayExport {
    array: Arc<Array>,
    read_only: bool,
}

impl ArrayExport {
    pub fn new(array: Arc<Array>, read_only: bool) -> Self {
        ArrayExport { array, read_only }
    }
}

fn io_error(err: EngineError) -> io::Error {
    io::Error::other(err.to_string())
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

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.array.read_at(buf, offset).map_err(io_error)
    }

    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        self.array.write_at(data, offset, fua).map_err(io_error)
    }

    fn flush(&self) -> io::Result<()> {
        self.array.flush().map_err(io_error)
    }

    fn trim(&self, offset: u64, len_bytes: u64, fua: bool) -> io::Result<()> {
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
        self.array
            .write_zeroes(offset, len_bytes)
            .map_err(io_error)?;
        if fua {
            self.array.flush().map_err(io_error)?;
        }
        Ok(())
    }
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

    let mut arrays = Vec::new();
    for (name, members) in &specs {
        let disks = open_members(members, args.read_only)?;
        let (array, report) = Array::assemble(
            disks,
            AssembleOptions {
                force: args.force,
                read_only: args.read_only,
                ..Default::default()
            },
        )
        .map_err(engine_error)?;
        for (member, why) in &report.excluded {
            eprintln!("raidkit: {name}: {member}: not used: {why}");
        }
        for note in &report.notes {
            eprintln!("raidkit: {name}: {note}");
        }
        arrays.push((name.clone(), Arc::new(array)));
    }

    let listener = match (&args.socket, args.port) {
        (Some(path), _) => Listener::bind_unix(path),
        (None, Some(port)) => Listener::bind_tcp(SocketAddr::new(args.bind, port)),
        (None, None) => unreachable!("checked above"),
    }
    .map_err(|e| CliError::failure(format!("cannot listen: {e}")))?;

    let mut builder = Server::builder();
    for (name, array) in &arrays {
        let export: Arc<dyn Export> = Arc::new(ArrayExport::new(array.clone(), args.read_only));
        builder = builder.export(name.clone(), export);
    }
    if let Some((first, _)) = arrays.first() {
        builder = builder.default_export(first.clone());
    }
    let server = builder
        .build()
        .map_err(|e| CliError::failure(format!("cannot start the server: {e}")))?;
    let shutdown = raidkit_nbd::shutdown_on_signals()
        .map_err(|e| CliError::failure(format!("cannot install signal handlers: {e}")))?;

    for (name, array) in &arrays {
        eprintln!(
            "raidkit: serving {name} ({} bytes) on {}",
            array.size_bytes(),
            listener.describe()
        );
    }
    let report = server
        .serve(&listener, shutdown)
        .map_err(|e| CliError::failure(format!("server failed: {e}")))?;
    eprintln!(
        "raidkit: shutting down after {} connections",
        report.connections_accepted
    );

    let mut failed = Vec::new();
    for (name, err) in &report.flush_failures {
        failed.push(format!("{name}: flush failed: {err}"));
    }
    for (name, array) in &arrays {
        if args.read_only {
            continue;
        }
        if report.flush_failures.iter().any(|(n, _)| n == name) {
            // Not flushed: leave it marked dirty so the next assembly resyncs.
            continue;
        }
        if let Err(e) = array.stop() {
            failed.push(format!("{name}: stop failed: {e}"));
        } else {
            eprintln!("raidkit: {name}: flushed and marked clean");
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

    #[test]
    fn array_spec_without_members_is_refused() {
        assert!(parse_array_spec("md1=").is_err());
        assert!(parse_array_spec("md1").is_err());
        assert!(parse_array_spec("=a.img").is_err());
    }
}
