//! `send_lat`: SEND latency test (ib_send_lat equivalent).

fn main() -> std::process::ExitCode {
    rdmaperf::runner::main(engine::bench::spec::TestSpec::SEND_LAT)
}
