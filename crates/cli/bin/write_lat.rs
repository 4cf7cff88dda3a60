//! `write_lat`: RDMA WRITE latency test (ib_write_lat equivalent).

use std::process::ExitCode;

use clap::Parser;
use rdmaperf::write_lat::{Cli, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    rdmaperf::finish("write_lat", run(&cli))
}
