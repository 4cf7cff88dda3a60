//! The `rdmaperf` binary: its command line and its `main`, which hands
//! each subcommand to its module — fabric health ([`crate::fabric`]:
//! `ports`, `doctor nccl`, `exporter`) and the cluster check
//! ([`crate::cluster`]). The tests are the other binaries (`write_bw`,
//! `read_lat`, …: [`crate::runner`]).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::fabric::{doctor, exporter, ports};

/// The test binaries `rdmaperf --help` lists.
const AFTER_HELP: &str = "\
The tests are separate binaries with perftest's flags:
  write_bw, read_bw, send_bw, atomic_bw   bandwidth (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw)
  write_lat, read_lat, send_lat           latency   (ib_write_lat, ib_read_lat, ib_send_lat)
Run one with --help for its flags; every one takes --prom FILE for Prometheus text.

Exit codes: 0 ok, 1 failure while running, 2 bad input, 3 a check found a FAIL or an error,
5 health: UNKNOWN (a check could not finish; never a reason to drain).";

/// `rdmaperf`: RDMA fabric health and cluster checks.
#[derive(Debug, Parser)]
#[command(name = "rdmaperf", version, about = "RDMA fabric health and cluster checks: ports, NCCL settings, Prometheus exporter, every link of a cluster", after_help = AFTER_HELP)]
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
    /// The node check a scheduler runs (Slurm HealthCheckProgram/Prolog, NHC, node-problem-detector): rails, rates, link flaps and error rates over time, an optional self-test against each rail's own past; PASS/WARN/FAIL/UNKNOWN.
    Health(Box<crate::health::HealthArgs>),
    /// Test every link of a cluster: launched once per node by srun, mpirun or torchrun; rank 0 reports.
    Cluster(Box<crate::cluster::ClusterArgs>),
}

/// `rdmaperf doctor` subcommands.
#[derive(Debug, Subcommand)]
pub enum DoctorCommand {
    /// Check a job's NCCL_* variables against this machine's devices, ports, GIDs and interfaces; read NCCL logs.
    Nccl(doctor::NcclArgs),
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
        Command::Health(args) => crate::health::run(&args),
    };
    crate::exit::finish("rdmaperf", result)
}
