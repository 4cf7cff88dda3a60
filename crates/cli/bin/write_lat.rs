//! `write_lat`: RDMA WRITE latency test (ib_write_lat equivalent).

use std::process::ExitCode;

use clap::Parser;
use rdmaperf::write_lat::{Cli, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(code),
        Err(e) => rdmaperf::finish("write_lat", Err(e)),
    }
}
