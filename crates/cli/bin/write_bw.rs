//! `write_bw`: RDMA WRITE bandwidth test (ib_write_bw equivalent).

use std::process::ExitCode;

use clap::Parser;
use rdmaperf::write_bw::{Cli, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    rdmaperf::finish("write_bw", run(&cli))
}
