//! `rdmaperf`: RDMA fabric health and cluster checks — `ports`, `doctor
//! nccl`, `exporter`, `cluster` (the tests are the other binaries:
//! `write_bw`, `read_lat`, …).

fn main() -> std::process::ExitCode {
    rdmaperf::app::main()
}
