//! `send_bw`: SEND bandwidth test (ib_send_bw equivalent).

fn main() -> std::process::ExitCode {
    rdmaperf::runner::main(engine::bench::spec::TestSpec::SEND_BW)
}
