//! The test binaries on an iWARP device (soft-iWARP, `siw`, inside the
//! VM: `scripts/vm-run --siw`): what iWARP cannot do is refused by name,
//! exit 2, before any traffic and before the client contacts a server.
//!
//! Every test needs `RDMAPERF_TEST_SIW_DEVICE` (and `RDMAPERF_TEST_DEVICE`
//! for the one that crosses providers) and is `#[ignore]`d for plain
//! `cargo test`; `scripts/test` runs them in the VM with siw brought up.

mod support;

use std::time::Duration;

use support::{Reaper, free_port, peers, test_device, text};

/// The iWARP device the tests run on. Panics when none is configured: a
/// test that ran against nothing must never pass.
fn siw_device() -> String {
    match std::env::var("RDMAPERF_TEST_SIW_DEVICE") {
        Ok(d) if !d.is_empty() => d,
        _ => panic!(
            "RDMAPERF_TEST_SIW_DEVICE is not set: these tests need an iWARP device \
             (run scripts/test, whose VM brings up soft-iWARP with scripts/vm-run --siw)"
        ),
    }
}

const LIMIT: Duration = Duration::from_secs(30);

/// Runs `bin` as a client toward a port nobody listens on: a binary that
/// contacted a server would fail to connect (exit 1), not exit 2.
fn refused_client(bin: &str, args: &[&str]) -> (i32, String) {
    let port = free_port().to_string();
    let mut all = args.to_vec();
    all.extend(["-p", &port, "127.0.0.1"]);
    let out = Reaper::spawn(bin, &all).wait_bounded(LIMIT, bin);
    (out.status.code().unwrap_or(-1), text(&out.stderr))
}

#[test]
#[ignore = "needs an iWARP device: RDMAPERF_TEST_SIW_DEVICE (scripts/test runs it on soft-iWARP)"]
fn every_test_on_iwarp_without_rdma_cm_is_refused_by_name_before_any_traffic() {
    let dev = siw_device();
    for bin in [
        env!("CARGO_BIN_EXE_write_bw"),
        env!("CARGO_BIN_EXE_read_bw"),
        env!("CARGO_BIN_EXE_send_bw"),
        env!("CARGO_BIN_EXE_write_lat"),
        env!("CARGO_BIN_EXE_read_lat"),
        env!("CARGO_BIN_EXE_send_lat"),
    ] {
        let (code, err) = refused_client(bin, &["-d", &dev, "-n", "10"]);
        let name = bin.rsplit('/').next().unwrap();
        assert_eq!(code, 2, "{name}: {err}");
        assert!(
            err.contains(&format!("{name}: error: {dev} is an iWARP device"))
                && err.contains(&format!("{name} connects them only with -R/--rdma_cm")),
            "{name}: {err}"
        );
    }
}

#[test]
#[ignore = "needs an iWARP device: RDMAPERF_TEST_SIW_DEVICE (scripts/test runs it on soft-iWARP)"]
fn atomics_and_immediate_data_on_iwarp_are_refused_naming_what_asks_for_them() {
    let dev = siw_device();
    let (code, err) = refused_client(env!("CARGO_BIN_EXE_atomic_bw"), &["-d", &dev, "-n", "10"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "atomic_bw: error: {dev} does not support atomic operations (atomic_cap NONE), \
             which atomic_bw posts"
        )),
        "{err}"
    );
    let (code, err) = refused_client(
        env!("CARGO_BIN_EXE_write_bw"),
        &["-d", &dev, "-n", "10", "--write_with_imm"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("--write_with_imm: {dev} is an iWARP device"))
            && err.contains("immediate"),
        "{err}"
    );
    let (code, err) = refused_client(env!("CARGO_BIN_EXE_send_bw"), &["-d", &dev, "-D", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("-D/--duration (a SEND test's timed phase ends with a SEND with immediate): {dev} is an iWARP device")),
        "{err}"
    );
}

#[test]
#[ignore = "needs an iWARP device: RDMAPERF_TEST_SIW_DEVICE and RDMAPERF_TEST_DEVICE (scripts/test)"]
fn a_server_on_iwarp_refuses_the_session_and_the_client_says_why() {
    let dev = siw_device();
    let rxe = test_device();
    let port = free_port();
    let bin = env!("CARGO_BIN_EXE_write_bw");
    let server = peers::server(bin, &dev, port, &[]);
    let client = peers::client(bin, &rxe, port, &["-n", "10"]).wait_bounded(LIMIT, "client");
    let err = text(&client.stderr);
    assert_ne!(client.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("{dev} is an iWARP device")) && err.contains("-R/--rdma_cm"),
        "the client must say why the server refused: {err}"
    );
    let server = server.wait_bounded(LIMIT, "server");
    assert!(
        text(&server.stderr).contains("is an iWARP device"),
        "{}",
        text(&server.stderr)
    );
}
