//! `send_bw`, `send_lat`, `atomic_bw` and `write_bw --write_with_imm` end
//! to end, and QP counts that need more than one CQ: server and client as
//! two processes on one RDMA device (soft-RoCE inside the VM). Tables are
//! checked against perftest's layout (`RESULT_FMT`, `RESULT_FMT_LAT`), the
//! JSON field by field, and the data checks: every message a SEND
//! receiver got is the sender's pattern at its size, and an atomic
//! target's words sum to the operations the client completed.
//!
//! Every test needs `RDMAPERF_TEST_DEVICE` and is `#[ignore]`d for plain
//! `cargo test`; `scripts/test` runs them in the VM.

mod support;

use std::time::Duration;

use support::peers::{self, json_lines};
use support::{
    assert_client_fails_soon_after_the_server_dies, assert_ok, free_port, test_device, text,
};

const SEND_BW: &str = env!("CARGO_BIN_EXE_send_bw");
const SEND_LAT: &str = env!("CARGO_BIN_EXE_send_lat");
const ATOMIC_BW: &str = env!("CARGO_BIN_EXE_atomic_bw");
const WRITE_BW: &str = env!("CARGO_BIN_EXE_write_bw");

/// perftest's `RESULT_FMT` (bandwidth) and `RESULT_FMT_LAT` (latency).
const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

fn rows(stdout: &[u8], header: &str) -> Vec<Vec<f64>> {
    support::table_rows(&text(stdout), header)
}

/// A temporary JSON file path for this test process.
fn json_file(tag: &str) -> String {
    std::env::temp_dir()
        .join(format!("rdmaperf-{tag}-{}.json", std::process::id()))
        .to_str()
        .unwrap()
        .to_owned()
}

fn read_json_line(path: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    std::fs::remove_file(path).ok();
    serde_json::from_str(text.lines().next().expect("a JSON line")).unwrap()
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn send_bw_both_sides_report_what_they_measured_and_every_message_is_checked() {
    let srv = json_file("send-srv");
    let (s, c) = peers::pair(
        SEND_BW,
        &["-s", "4096", "-n", "300", "-q", "2", "--json", "-"],
        &["--json", &srv],
    );
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let v = &json_lines(&c.stdout)[0];
    assert_eq!(v["kind"], "send_bw");
    assert_eq!(v["measured_on"], "sender");
    assert_eq!(v["result"]["messages"], 600);
    assert_eq!(v["result"]["operations"], 600);
    assert_eq!(
        v["config"]["rx_depth"], 300,
        "512 clamped to -n, as perftest"
    );
    let sv = read_json_line(&srv);
    assert_eq!(sv["role"], "server");
    assert_eq!(sv["measured_on"], "receiver");
    assert_eq!(sv["result"]["operations"], 600);
    assert_eq!(sv["result"]["messages"], 600);
    assert!(sv["result"]["bw_avg_mib_s"].as_f64().unwrap() > 0.0);
    // 4 KiB messages land at offset 0 of each QP's ring: one slot each.
    assert_eq!(sv["data_check"]["bytes_checked"], 2 * 4096);
    // The server prints its own table (perftest's send server), no peak.
    let server_rows = rows(&s.stdout, BW_HEADER);
    assert_eq!(server_rows.len(), 1, "{}", text(&s.stdout));
    assert_eq!((server_rows[0][0], server_rows[0][1]), (4096.0, 600.0));
    assert_eq!(
        server_rows[0][2], 0.0,
        "perftest shows no peak on a send server"
    );
    assert!(server_rows[0][3] > 0.0);
    let banner = text(&s.stderr);
    assert!(
        banner.contains("\n                    Send BW Test\n"),
        "{banner}"
    );
    assert!(banner.contains(" RX depth        : 300\n"), "{banner}");
    assert!(!banner.contains(" TX depth"), "{banner}");
    let banner = text(&c.stderr);
    assert!(banner.contains(" TX depth        : 128\n"), "{banner}");
    assert!(!banner.contains(" RX depth"), "{banner}");
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn send_bw_sweeps_sizes_runs_for_a_duration_and_both_ways() {
    // -a: one receive ring (posted once, for 8 MiB) serves every size.
    let (s, c) = peers::pair(SEND_BW, &["-a", "-n", "5"], &[]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let sizes: Vec<f64> = rows(&c.stdout, BW_HEADER).iter().map(|r| r[0]).collect();
    assert_eq!(
        sizes,
        (1..=23).map(|i| f64::from(1u32 << i)).collect::<Vec<_>>()
    );
    assert_eq!(rows(&s.stdout, BW_HEADER).len(), 23);
    // Duration mode, and both directions at once in duration mode: each
    // side ends once every QP's end of phase has come.
    for extra in [
        &["-D", "3", "-s", "1024"][..],
        &["-D", "3", "-s", "1024", "-b", "-q", "2"],
    ] {
        let mut args = extra.to_vec();
        args.extend(["--json", "-"]);
        let (s, c) = peers::pair(SEND_BW, &args, &[]);
        assert_ok(&c, &format!("client {extra:?}"));
        assert_ok(&s, &format!("server {extra:?}"));
        let v = &json_lines(&c.stdout)[0];
        assert!(v["result"]["messages"].as_u64().unwrap() > 0, "{v}");
        let bidirectional = extra.contains(&"-b");
        assert_eq!(
            v["measured_on"],
            if bidirectional {
                "both sides' senders"
            } else {
                "sender"
            }
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn a_dead_send_bw_server_ends_the_client() {
    // Its bad flags are checked on the host (tests/cli.rs).
    let dev = test_device();
    let port = free_port();
    let s = peers::server(SEND_BW, &dev, port, &[]);
    let c = peers::client(SEND_BW, &dev, port, &["-D", "30"]);
    assert_client_fails_soon_after_the_server_dies(s, c);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn send_lat_ping_pongs_with_checked_messages_and_the_latency_verdict() {
    let srv = json_file("sendlat-srv");
    let (s, c) = peers::pair(
        SEND_LAT,
        &["-s", "64", "-n", "300", "--json", "-", "--json-histogram"],
        &["--json", &srv],
    );
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let v = &json_lines(&c.stdout)[0];
    assert_eq!(v["kind"], "send_lat");
    assert_eq!(v["reported"], "half round trip (RTT/2), microseconds");
    let r = &v["result"];
    assert_eq!(r["iterations"], 300);
    for k in ["t_min_us", "p50_us", "p99_us", "t_max_us"] {
        assert!(r[k].as_f64().unwrap() > 0.0, "{k}: {r}");
    }
    assert!(v["histogram"].is_string());
    // One receive slot of 64 B per message; every slot of the ring the
    // 300 messages used (of 512 posted: 300, distinct offsets 64).
    assert_eq!(v["data_check"]["bytes_checked"], 64 * 64);
    let sv = read_json_line(&srv);
    assert_eq!(sv["data_check"]["bytes_checked"], 64 * 64);
    // The server prints perftest's latency table too (the client's stdout
    // is JSON here).
    let t = rows(&s.stdout, LAT_HEADER);
    assert_eq!(t.len(), 1, "{}", text(&s.stdout));
    assert_eq!((t[0][0], t[0][1]), (64.0, 300.0));
    assert!(text(&s.stderr).contains(" RX depth        : 300\n"));
    // The verdict: no RTT/2 under emulation is below 0.001 us.
    let (_, c) = peers::pair(SEND_LAT, &["-n", "100", "--max-latency", "0.001"], &[]);
    assert_eq!(c.status.code(), Some(3), "{}", text(&c.stderr));
    assert!(
        text(&c.stdout)
            .lines()
            .any(|l| l.starts_with("verdict: FAIL")),
        "{}",
        text(&c.stdout)
    );
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn atomic_bw_counts_every_operation_in_the_targets_words() {
    for (kind, args) in [
        ("fetch_add_bw", &["-n", "300", "-q", "2"][..]),
        (
            "cmp_swap_bw",
            &["-A", "CMP_AND_SWAP", "-n", "300", "-q", "2"][..],
        ),
        ("cmp_swap_bw", &["-A", "CMP_AND_SWAP", "-D", "3"][..]),
    ] {
        let srv = json_file(&format!("atomic-{kind}"));
        let mut client = args.to_vec();
        client.extend(["--json", "-"]);
        let (s, c) = peers::pair(ATOMIC_BW, &client, &["--json", &srv]);
        assert_ok(&c, &format!("client {args:?}"));
        assert_ok(&s, &format!("server {args:?}"));
        let v = &json_lines(&c.stdout)[0];
        assert_eq!(v["kind"], kind);
        assert_eq!(v["config"]["sizes"], serde_json::json!([8]));
        let ops = v["result"]["operations"].as_u64().unwrap();
        if !args.contains(&"-D") {
            assert_eq!(ops, 600);
        }
        let sv = read_json_line(&srv);
        // The server checked its words against the client's count: 64
        // words of 8 bytes per QP.
        let qps = if args.contains(&"-q") { 2 } else { 1 };
        assert_eq!(sv["data_check"]["bytes_checked"], 64 * 8 * qps, "{sv}");
        let banner = text(&c.stderr);
        let title = if kind == "fetch_add_bw" {
            "Atomic FETCH_AND_ADD BW Test"
        } else {
            "Atomic CMP_AND_SWAP BW Test"
        };
        assert!(
            banner.contains(&format!("\n                    {title}\n")),
            "{banner}"
        );
        assert!(banner.contains(" Outstand reads  : "), "{banner}");
    }
    // Its bad flags are checked on the host (tests/cli.rs).
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn write_with_imm_is_counted_by_the_server_and_256_qps_spread_over_cqs() {
    let srv = json_file("imm-srv");
    let (s, c) = peers::pair(
        WRITE_BW,
        &["--write_with_imm", "-s", "2048", "-n", "200", "--json", "-"],
        &["--json", &srv],
    );
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let v = &json_lines(&c.stdout)[0];
    assert_eq!(v["kind"], "write_bw");
    assert_eq!(v["config"]["write_with_imm"], true);
    assert_eq!(v["measured_on"], "sender");
    let sv = read_json_line(&srv);
    assert_eq!(sv["measured_on"], "receiver");
    assert_eq!(sv["result"]["operations"], 200);
    assert!(text(&s.stderr).contains(" RX depth        : 200\n"));
    // 256 QPs × tx depth 128 on one thread: 32769 CQ entries, more than
    // rxe's 32767: two CQs (perftest runs -q 256; this was refused).
    let dev = test_device();
    let port = free_port();
    let s = peers::server(WRITE_BW, &dev, port, &["--timeout", "60"]);
    let c = peers::client(
        WRITE_BW,
        &dev,
        port,
        &["-q", "256", "-n", "20", "-s", "64", "--timeout", "60"],
    )
    .wait_bounded(Duration::from_secs(240), "client");
    assert_ok(&c, "client -q 256");
    assert_ok(&s.wait_bounded(Duration::from_secs(60), "server"), "server");
    let t = rows(&c.stdout, BW_HEADER);
    assert_eq!((t[0][0], t[0][1]), (64.0, 20.0 * 256.0));
}
