//! `read_bw` and `read_lat` end to end: server and client as two processes
//! on one RDMA device (soft-RoCE inside the VM). The figures are checked
//! against perftest's table layout (`RESULT_FMT`, `RESULT_FMT_LAT`), the
//! JSON field by field, and the data check: after every size the client's
//! landing area holds the server's pattern byte for byte (the binary
//! compares; its JSON says how many bytes).
//!
//! Every test needs `RDMAPERF_TEST_DEVICE` and is `#[ignore]`d for plain
//! `cargo test`; `scripts/test` runs them in the VM.

mod support;

use std::time::Duration;

use support::peers::{self, json_lines};
use support::{
    assert_client_fails_soon_after_the_server_dies, assert_ok, free_port, test_device, text,
};

const READ_BW: &str = env!("CARGO_BIN_EXE_read_bw");
const READ_LAT: &str = env!("CARGO_BIN_EXE_read_lat");

/// perftest's `RESULT_FMT` (bandwidth) and `RESULT_FMT_LAT` (latency).
const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// The numeric rows under perftest's `header`.
fn rows(stdout: &str, header: &str) -> Vec<Vec<f64>> {
    support::table_rows(stdout, header)
}

fn sweep() -> Vec<f64> {
    (1..=23).map(|i| f64::from(1u32 << i)).collect()
}

// --- read_bw -------------------------------------------------------------------

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn read_bw_default_run_prints_the_perftest_table_on_both_sides() {
    let (s, c) = peers::pair(READ_BW, &["-n", "300"], &[]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let client = rows(&text(&c.stdout), BW_HEADER);
    assert_eq!(client.len(), 1, "{client:?}");
    let r = &client[0];
    assert_eq!((r[0], r[1]), (65536.0, 300.0));
    assert!(r[3] > 0.0 && r[2] >= r[3] && r[4] > 0.0, "{r:?}");
    // The server, passive, prints the client's figures (as ib_read_bw).
    assert_eq!(rows(&text(&s.stdout), BW_HEADER), client);
    let banner = text(&c.stderr);
    // perftest's title line and fields (on stderr: stdout is results).
    assert!(
        banner.contains("\n                    RDMA_Read BW Test\n"),
        "{banner}"
    );
    assert!(banner.contains(" Role            : client"), "{banner}");
    assert!(banner.contains(" Outstand reads  : "), "{banner}");
    assert!(!banner.contains("Max inline data"), "{banner}");
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn read_bw_all_sizes_sweep_from_2_bytes_to_8_mib() {
    let (s, c) = peers::pair(READ_BW, &["-a", "-n", "5"], &[]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let sizes: Vec<f64> = rows(&text(&c.stdout), BW_HEADER)
        .iter()
        .map(|r| r[0])
        .collect();
    assert_eq!(sizes, sweep());
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn read_bw_json_is_complete_and_the_reads_brought_the_servers_bytes() {
    let file = std::env::temp_dir().join(format!("rdmaperf-read-srv-{}.json", std::process::id()));
    let f = file.to_str().unwrap();
    let (s, c) = peers::pair(
        READ_BW,
        &[
            "-s", "1024", "-n", "200", "-q", "2", "-o", "4", "--json", "-",
        ],
        &["--json", f],
    );
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let lines = json_lines(&c.stdout);
    assert_eq!(lines.len(), 1, "only JSON on stdout with --json -");
    let v = &lines[0];
    let dev = test_device();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["kind"], "read_bw");
    assert_eq!(v["role"], "client");
    assert_eq!(v["direction"], "unidirectional");
    assert_eq!(v["config"]["sizes"], serde_json::json!([1024]));
    assert_eq!(v["config"]["iters"], 200);
    assert_eq!(v["config"]["qps"], 2);
    assert_eq!(v["config"]["outs"], 4);
    assert_eq!(v["outstanding_reads"], 4);
    for side in ["local", "remote"] {
        assert_eq!(v[side]["device"], dev.as_str());
        assert!(v[side]["gid"].as_str().unwrap().contains(':'));
    }
    let r = &v["result"];
    assert_eq!(r["bytes"], 1024);
    assert_eq!(r["iterations"], 200);
    assert_eq!(r["messages"], 400);
    let mib = r["bw_avg_mib_s"].as_f64().unwrap();
    let gbps = r["bw_avg_gbps"].as_f64().unwrap();
    assert!(mib > 0.0 && (mib * 1048576.0 * 8.0 / 1e9 - gbps).abs() < 1e-9 * gbps.max(1.0));
    // 1 KiB reads cycle through the 4 KiB ring's 4 slots; each QP's
    // landing area was zeroed before the size and compared after it.
    assert_eq!(v["data_check"]["bytes_checked"], 2 * 4096);
    let srv: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&file).unwrap().trim()).unwrap();
    std::fs::remove_file(&file).ok();
    assert_eq!(srv["role"], "server");
    assert_eq!(srv["kind"], "read_bw");
    assert_eq!(srv["result"]["messages"], 400);
    assert!(
        srv.get("data_check").is_none(),
        "the passive server read nothing"
    );
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn read_bw_duration_and_bidirectional_modes() {
    let (s, c) = peers::pair(
        READ_BW,
        &["-D", "3", "-f", "1", "-s", "4096", "--json", "-"],
        &[],
    );
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let v = &json_lines(&c.stdout)[0];
    assert!(v["result"]["iterations"].as_u64().unwrap() > 0, "{v}");
    assert!(v["result"]["elapsed_s"].as_f64().unwrap() > 0.5, "{v}");
    assert_eq!(v["data_check"]["bytes_checked"], 4096);

    let (s, c) = peers::pair(
        READ_BW,
        &["-b", "-s", "4096", "-n", "200", "--json", "-"],
        &[],
    );
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let v = &json_lines(&c.stdout)[0];
    assert_eq!(v["direction"], "bidirectional");
    let (mine, peer) = (&v["result"], &v["peer_result"]);
    assert_eq!(mine["messages"], 400, "both directions' reads");
    assert_eq!(peer["messages"], 200);
    let srv = rows(&text(&s.stdout), BW_HEADER);
    assert_eq!(srv.len(), 1);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn read_bw_expect_rate_verdicts_pass_and_fail() {
    let tree = peers::FakeSysfs::with_rate("read-sysfs", &test_device(), "10 Gb/sec (1X FDR10)\n");
    let (s, c) = peers::pair(
        READ_BW,
        &[
            "-n",
            "200",
            "--expect-rate",
            "0.001",
            "--min-efficiency",
            "0.5",
            "--sysfs-root",
            tree.root(),
        ],
        &[],
    );
    assert_ok(&s, "server");
    let out = text(&c.stdout);
    assert_eq!(c.status.code(), Some(0), "{out}{}", text(&c.stderr));
    assert!(out.lines().any(|l| l.starts_with("verdict: PASS")), "{out}");

    let (_, c) = peers::pair(
        READ_BW,
        &["-n", "200", "--expect-rate", "400", "--json", "-"],
        &[],
    );
    assert_eq!(c.status.code(), Some(3), "{}", text(&c.stderr));
    let verdict = json_lines(&c.stdout)
        .into_iter()
        .find(|v| v["kind"] == "verdict")
        .expect("verdict JSON line");
    assert_eq!(verdict["verdict"]["pass"], false);
}

// --- read_lat ------------------------------------------------------------------

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn read_lat_default_run_prints_the_perftest_table_on_the_client_only() {
    let (s, c) = peers::pair(READ_LAT, &["-n", "300"], &[]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let r = rows(&text(&c.stdout), LAT_HEADER);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0][0], r[0][1]), (2.0, 300.0));
    // min <= typical <= max, avg within [min, max].
    assert!(
        r[0][2] > 0.0 && r[0][2] <= r[0][4] && r[0][4] <= r[0][3],
        "{r:?}"
    );
    assert!(r[0][2] <= r[0][5] && r[0][5] <= r[0][3], "{r:?}");
    // As ib_read_lat, the passive server prints no table.
    assert!(s.stdout.is_empty(), "{}", text(&s.stdout));
    assert!(text(&c.stderr).contains("                    RDMA_Read Latency Test\n"));
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn read_lat_all_sizes_sweep_from_2_bytes_to_8_mib() {
    let (s, c) = peers::pair(READ_LAT, &["-a", "-n", "5"], &[]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let sizes: Vec<f64> = rows(&text(&c.stdout), LAT_HEADER)
        .iter()
        .map(|r| r[0])
        .collect();
    assert_eq!(sizes, sweep());
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn read_lat_json_reports_full_round_trips_with_percentiles_histogram_and_data_check() {
    let (s, c) = peers::pair(
        READ_LAT,
        &["-n", "400", "-s", "64", "--json", "-", "--json-histogram"],
        &[],
    );
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let lines = json_lines(&c.stdout);
    assert_eq!(lines.len(), 1);
    let v = &lines[0];
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["kind"], "read_lat");
    assert_eq!(v["config"]["iters"], 400);
    assert!(v["outstanding_reads"].as_u64().unwrap() >= 1);
    // rtt_factor 1: a read's sample is its whole round trip.
    assert_eq!(v["reported"], "full round trip (RTT), microseconds");
    assert!(v["clock"]["read_cost_ns"].as_f64().unwrap() > 0.0);
    let r = &v["result"];
    assert_eq!(r["bytes"], 64);
    assert_eq!(r["iterations"], 400);
    assert_eq!(r["exact_percentiles"], true);
    let (p50, p99, max) = (
        r["p50_us"].as_f64().unwrap(),
        r["p99_us"].as_f64().unwrap(),
        r["t_max_us"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{r}");
    let h = engine::results::lat::histogram_from_base64(v["histogram"].as_str().unwrap()).unwrap();
    assert_eq!(h.len(), 400);
    // The histogram holds round trips in ns; the median is reported whole.
    let median_ns = h.value_at_quantile(0.5) as f64;
    assert!(
        (median_ns / 1000.0 - p50).abs() <= p50 * 0.01 + 0.01,
        "{median_ns} vs {p50}"
    );
    assert_eq!(v["data_check"]["bytes_checked"], 64);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn read_lat_duration_mode_and_verdicts() {
    let (s, c) = peers::pair(READ_LAT, &["-D", "3", "-f", "1", "--json", "-"], &[]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let v = &json_lines(&c.stdout)[0];
    assert!(v["result"]["iterations"].as_u64().unwrap() > 10, "{v}");

    let (_, c) = peers::pair(
        READ_LAT,
        &["-n", "200", "--max-latency", "0.001", "--json", "-"],
        &[],
    );
    assert_eq!(c.status.code(), Some(3), "{}", text(&c.stderr));
    let verdict = json_lines(&c.stdout)
        .into_iter()
        .find(|v| v["kind"] == "verdict")
        .expect("verdict line");
    assert_eq!(verdict["verdict"]["pass"], false);
    let (_, c) = peers::pair(
        READ_LAT,
        &[
            "-n",
            "200",
            "--max-latency",
            "1000000",
            "--percentile",
            "p99",
        ],
        &[],
    );
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stderr));
    assert!(
        text(&c.stdout)
            .lines()
            .any(|l| l.starts_with("verdict: PASS p99"))
    );
}

// --- both ------------------------------------------------------------------------

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn the_client_fails_within_the_timeout_when_the_server_dies() {
    let dev = test_device();
    for (bin, iters) in [(READ_BW, "10000000"), (READ_LAT, "100000000")] {
        let port = free_port();
        let s = peers::server(bin, &dev, port, &[]);
        let c = peers::client(bin, &dev, port, &["-n", iters, "--timeout", "4"]);
        assert_client_fails_soon_after_the_server_dies(s, c);
    }
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn a_server_refuses_a_client_of_another_test_and_says_why() {
    let dev = test_device();
    let port = free_port();
    let s = peers::server(READ_BW, &dev, port, &[]);
    // What is tested is the refusal, not how soon the server listens: the
    // client may dial for 30 s (CI once saw a server not listening within
    // the default 10 s, its account lost with it).
    let c = peers::client(
        env!("CARGO_BIN_EXE_write_bw"),
        &dev,
        port,
        &["-n", "100", "--timeout", "30"],
    );
    let c = c.wait_bounded(Duration::from_secs(60), "client");
    let s = s.wait_bounded(Duration::from_secs(45), "server");
    // Both accounts: if the client never reached the server, the server's
    // says why.
    let err = text(&c.stderr);
    let why = format!("client: {err}\nserver: {}", text(&s.stderr));
    assert_eq!(c.status.code(), Some(1), "{why}");
    assert!(
        err.contains("this server runs read_bw") && err.contains("write_bw"),
        "{why}"
    );
    assert!(!s.status.success(), "{why}");
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn a_persistent_server_serves_clients_one_after_another_and_frees_each_session() {
    let dev = test_device();
    let port = free_port();
    let s = peers::server(READ_BW, &dev, port, &["--persistent"]);
    let fds = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count()
    };
    let run = |args: &[&str]| {
        peers::client(READ_BW, &dev, port, args).wait_bounded(Duration::from_secs(60), "client")
    };
    assert_ok(&run(&["-n", "200"]), "first client");
    // The server has freed the session once the client has its answer;
    // give it a moment to close its side.
    let settle = || std::thread::sleep(Duration::from_millis(300));
    settle();
    let baseline = (fds(s.id()), support::resource_counts(&dev));
    // 11 more: every fifth killed mid-run (that session fails, the server
    // goes on); after each, fds and device resources are back at baseline.
    let sizes = ["4096", "65536", "2", "1M"];
    for n in 2..=12 {
        if n % 5 == 2 {
            let mut doomed = peers::client(READ_BW, &dev, port, &["-n", "10000000"]);
            // Killed once its session holds device resources (a fixed 3 s
            // was sometimes before the server had even accepted it).
            let until = std::time::Instant::now() + Duration::from_secs(20);
            while support::resource_counts(&dev) == baseline.1 && std::time::Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            std::thread::sleep(Duration::from_secs(1));
            doomed.kill();
        } else {
            let size = sizes[n % sizes.len()];
            let c = run(&["-n", "100", "-s", size, "-q", "2"]);
            assert_ok(&c, &format!("client {n}"));
        }
        // A killed client's session may still be failing (its QPs
        // retrying); it ends within --timeout (10 s).
        let until = std::time::Instant::now() + Duration::from_secs(12);
        let mut now = (fds(s.id()), support::resource_counts(&dev));
        while now != baseline && std::time::Instant::now() < until {
            settle();
            now = (fds(s.id()), support::resource_counts(&dev));
        }
        assert_eq!(now, baseline, "after client {n}: fds and rdma resources");
    }
    let pid = s.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let out = s.wait_bounded(Duration::from_secs(30), "server");
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "SIGTERM ends a persistent server cleanly: {err}"
    );
    assert!(
        err.contains("stopped by SIGTERM after 12 sessions"),
        "{err}"
    );
    assert!(err.contains("session 1 with 127.0.0.1"), "{err}");
    for n in [2, 7, 12] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("session {n} with")) && l.contains("failed")),
            "session {n} failed: {err}"
        );
    }
    assert!(err.contains("session 11 with"), "{err}");
    assert_eq!(
        rows(&text(&out.stdout), BW_HEADER).len(),
        9,
        "one row per completed session"
    );
}
