//! `read_lat`: RDMA READ latency test (ib_read_lat equivalent).

fn main() -> std::process::ExitCode {
    rdmaperf::runner::main(engine::bench::spec::TestSpec::READ_LAT)
}
