//! `write_lat`: RDMA WRITE latency test (ib_write_lat equivalent).
//!
//! This release only inventories devices (`--list-devices`); the
//! measurement itself is not built yet.

use std::process::ExitCode;

use clap::Parser;
use rdmaperf::{DeviceArgs, ListArgs, UsageError};

/// RDMA WRITE latency test (ib_write_lat equivalent).
#[derive(Debug, Parser)]
#[command(name = "write_lat", version, about)]
struct Cli {
    #[command(flatten)]
    device: DeviceArgs,
    #[command(flatten)]
    list: ListArgs,
}

fn run(cli: &Cli) -> anyhow::Result<()> {
    if cli.list.list_devices {
        return rdmaperf::run_list(&cli.device, &cli.list);
    }
    Err(UsageError(
        "the measurement is not implemented yet in this build; only --list-devices is available"
            .into(),
    )
    .into())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    rdmaperf::finish("write_lat", run(&cli))
}
