//! Fabric health, the `rdmaperf` binary's subcommands beside the test
//! binaries: `rdmaperf ports` (what ibstat, show_gids and the port
//! counters tell, in one table, with a PASS/FAIL check), `rdmaperf doctor
//! nccl` (a job's NCCL variables checked against this machine, NCCL logs
//! read) and `rdmaperf exporter` (Prometheus `/metrics` and `/probe`).
//! Each subcommand is one module; the pure parts live in
//! `engine::fabric::ports`, `engine::nccl` and `engine::fabric::prom`. The
//! binary's command line and `main` are [`crate::app`].

pub mod doctor;
pub mod exporter;
pub mod http;
pub mod ports;

use std::path::PathBuf;

use crate::sysfs::Sysfs;

/// Where sysfs is (`/sys`; a copy of a machine's tree or a container's
/// host mount elsewhere): the flag, made into the one [`Sysfs`] a
/// subcommand reads by [`SysfsArgs::sysfs`].
#[derive(Debug, Clone, clap::Args)]
pub struct SysfsArgs {
    /// Read sysfs below this directory instead of /sys (e.g. a host's /sys mounted in a container, or a saved tree).
    #[arg(long = "sysfs-root", value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
}

impl SysfsArgs {
    /// The sysfs the flag names.
    pub fn sysfs(&self) -> Sysfs {
        Sysfs::at(&self.sysfs_root)
    }
}
