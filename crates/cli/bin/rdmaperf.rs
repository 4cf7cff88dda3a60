//! `rdmaperf`: RDMA fabric health — `ports`, `doctor nccl`, `exporter`
//! (the tests are the other binaries: `write_bw`, `read_lat`, …).

fn main() -> std::process::ExitCode {
    rdmaperf::fabric::main()
}
