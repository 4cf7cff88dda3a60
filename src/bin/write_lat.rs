//! `write_lat`: RDMA WRITE latency test (ib_write_lat equivalent).

fn main() -> std::process::ExitCode {
    rdmaperf::runner::main(engine::bench::spec::TestSpec::WRITE_LAT)
}
