//! `atomic_bw`: atomic bandwidth test (ib_atomic_bw equivalent);
//! `-A FETCH_AND_ADD` (the default) or `-A CMP_AND_SWAP`.

fn main() -> std::process::ExitCode {
    rdmaperf::runner::main(engine::bench::spec::TestSpec::FETCH_ADD_BW)
}
