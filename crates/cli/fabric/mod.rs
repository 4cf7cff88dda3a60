//! The `rdmaperf` binary: fabric health beside the test binaries.
//! `rdmaperf ports` (what ibstat, show_gids and the port counters tell, in
//! one table, with a PASS/FAIL check), `rdmaperf doctor nccl` (a job's
//! NCCL variables checked against this machine, NCCL logs read) and
//! `rdmaperf exporter` (Prometheus `/metrics` and `/probe`). Each
//! subcommand is one module; the pure parts live in `engine::fabric::ports`,
//! `engine::nccl` and `engine::fabric::prom`.

pub mod doctor;
pub mod exporter;
pub mod http;
pub mod ports;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The test binaries `rdmaperf --help` lists.
const AFTER_HELP: &str = "\
The tests are separate binaries with perftest's flags:
  write_bw, read_bw, send_bw, atomic_bw   bandwidth (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw)
  write_lat, read_lat, send_lat           latency   (ib_write_lat, ib_read_lat, ib_send_lat)
Run one with --help for its flags; every one takes --prom FILE for Prometheus text.

Exit codes: 0 ok, 1 failure while running, 2 bad input, 3 a check found a FAIL or an error.";

/// `rdmaperf`: RDMA fabric health.
#[derive(Debug, Parser)]
#[command(name = "rdmaperf", version, about = "RDMA fabric health: ports, NCCL settings, Prometheus exporter", after_help = AFTER_HELP)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every RDMA device and port: state, rate, MTU, GIDs and counters (ibstat + show_gids), with an optional PASS/FAIL check.
    Ports(ports::PortsArgs),
    /// Check settings against this machine.
    Doctor {
        /// What to check.
        #[command(subcommand)]
        what: DoctorCommand,
    },
    /// Serve Prometheus metrics: /metrics (this host's ports) and /probe (a short test against a --persistent server).
    Exporter(exporter::ExporterArgs),
    /// Test every link of a cluster: launched once per node by srun, mpirun or torchrun; rank 0 reports.
    Cluster(Box<crate::cluster::ClusterArgs>),
}

/// `rdmaperf doctor` subcommands.
#[derive(Debug, Subcommand)]
pub enum DoctorCommand {
    /// Check a job's NCCL_* variables against this machine's devices, ports, GIDs and interfaces; read NCCL logs.
    Nccl(doctor::NcclArgs),
}

/// Where sysfs is (`/sys`; a copy of a machine's tree or a container's
/// host mount elsewhere).
#[derive(Debug, Clone, clap::Args)]
pub struct SysfsArgs {
    /// Read sysfs below this directory instead of /sys (e.g. a host's /sys mounted in a container, or a saved tree).
    #[arg(long = "sysfs-root", value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
}

impl SysfsArgs {
    /// Whether this is the live system's sysfs (the devices can then be
    /// opened for what sysfs lacks, such as the MTU).
    pub fn is_live(&self) -> bool {
        self.sysfs_root == std::path::Path::new("/sys")
    }
}

/// `rdmaperf`'s `main`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Ports(args) => ports::run(&args),
        Command::Doctor {
            what: DoctorCommand::Nccl(args),
        } => doctor::run(&args),
        Command::Exporter(args) => exporter::run(&args),
        Command::Cluster(args) => crate::cluster::run(&args),
    };
    crate::finish("rdmaperf", result)
}
