//! `write_bw`: RDMA WRITE bandwidth test (ib_write_bw equivalent).

fn main() -> std::process::ExitCode {
    rdmaperf::runner::main(engine::bench::spec::TestSpec::WRITE_BW)
}
