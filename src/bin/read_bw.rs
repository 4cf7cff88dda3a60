//! `read_bw`: RDMA READ bandwidth test (ib_read_bw equivalent).

fn main() -> std::process::ExitCode {
    rdmaperf::runner::main(engine::bench::spec::TestSpec::READ_BW)
}
