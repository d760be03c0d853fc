//! `raidkit install-units`: writes the systemd units that run raidkit unattended: one that
//! serves every array the configuration file names (`serve --scan`), one that watches them
//! (`monitor --scan`, to syslog and wherever the file's MAILADDR and PROGRAM say). The units
//! name this very binary, the configuration file and the sockets given; `systemctl
//! daemon-reload` and `systemctl enable --now raidkit-serve raidkit-monitor` start them.

use raidkit_cli::CliError;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct UnitsArgs {
    /// Where to write the unit files.
    #[arg(long, value_name = "DIR", default_value = "/etc/systemd/system")]
    pub dir: PathBuf,
    /// The configuration file the units read.
    #[arg(long, value_name = "PATH", default_value = raidkit_cli::config::DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// The NBD socket the server listens on (its control socket: this with ".ctl").
    #[arg(long, value_name = "PATH", default_value = "/run/raidkit/nbd.sock")]
    pub socket: PathBuf,
    /// Print the units instead of writing them.
    #[arg(long)]
    pub dry_run: bool,
}

/// The two units: file name and text.
pub fn units(binary: &Path, config: &Path, socket: &Path) -> [(&'static str, String); 2] {
    let (bin, conf, sock) = (binary.display(), config.display(), socket.display());
    let run_dir = socket
        .parent()
        .map_or_else(|| "/run/raidkit".into(), |p| p.display().to_string());
    [
        (
            "raidkit-serve.service",
            format!(
                "[Unit]\n\
                 Description=raidkit: serve the arrays of {conf} as NBD disks\n\
                 Documentation=man:mdadm.conf(5)\n\
                 After=local-fs.target\n\
                 ConditionPathExists={conf}\n\
                 \n\
                 [Service]\n\
                 Type=exec\n\
                 ExecStartPre=/bin/mkdir -p {run_dir}\n\
                 ExecStart={bin} serve --scan --config {conf} --socket {sock} --log-format json\n\
                 # SIGTERM stops every array cleanly (superblocks marked clean) before exit.\n\
                 KillSignal=SIGTERM\n\
                 TimeoutStopSec=300\n\
                 Restart=on-failure\n\
                 RestartSec=5\n\
                 \n\
                 [Install]\n\
                 WantedBy=multi-user.target\n"
            ),
        ),
        (
            "raidkit-monitor.service",
            format!(
                "[Unit]\n\
                 Description=raidkit: report failures and degraded arrays (mdadm --monitor's events)\n\
                 After=raidkit-serve.service\n\
                 Wants=raidkit-serve.service\n\
                 ConditionPathExists={conf}\n\
                 \n\
                 [Service]\n\
                 Type=exec\n\
                 ExecStart={bin} monitor --scan --config {conf} --control {sock}.ctl --syslog\n\
                 Restart=always\n\
                 RestartSec=10\n\
                 \n\
                 [Install]\n\
                 WantedBy=multi-user.target\n"
            ),
        ),
    ]
}

pub fn run(args: UnitsArgs) -> Result<(), CliError> {
    let binary = std::env::current_exe()
        .map_err(|e| CliError::failure(format!("cannot tell where this binary is: {e}")))?;
    for (name, text) in units(&binary, &args.config, &args.socket) {
        if args.dry_run {
            println!("# {}\n{text}", args.dir.join(name).display());
            continue;
        }
        let path = args.dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| CliError::failure(format!("{}: {e}", path.display())))?;
        println!("raidkit: wrote {}", path.display());
    }
    if !args.dry_run {
        println!(
            "raidkit: now `systemctl daemon-reload` and `systemctl enable --now raidkit-serve raidkit-monitor`"
        );
    }
    Ok(())
}
