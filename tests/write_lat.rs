//! `write_lat` end to end: server and client as two processes on one RDMA
//! device (soft-RoCE inside the VM). `#[ignore]`d without a device;
//! `scripts/test` runs them in the VM. Every wait is bounded.

mod support;

use std::process::Output;
use std::time::Duration;

use support::{
    Reaper, assert_client_fails_soon_after_the_server_dies, assert_each_bad_flag_exits_2,
    assert_ok, free_port, test_device, text,
};

fn spawn(args: &[&str]) -> Reaper {
    Reaper::spawn(env!("CARGO_BIN_EXE_write_lat"), args)
}

/// The server's arguments in every test.
fn server_args<'a>(dev: &'a str, port: &'a str) -> [&'a str; 12] {
    [
        "-d",
        dev,
        "--bind",
        "127.0.0.1",
        "-p",
        port,
        "--timeout",
        "10",
        "--accept-timeout",
        "30",
        "-u",
        "18",
    ]
}

fn server(dev: &str, port: &str) -> Reaper {
    spawn(&server_args(dev, port))
}

fn pair(args: &[&str]) -> (Output, Output) {
    let dev = test_device();
    let port = free_port().to_string();
    let s = server(&dev, &port);
    // A ~1 s ACK timeout: under emulation ACKs are often later than 67 ms.
    let mut all = vec!["-d", dev.as_str(), "-p", &port, "-u", "18"];
    if !args.contains(&"--timeout") {
        all.extend_from_slice(&["--timeout", "20"]);
    }
    all.extend_from_slice(args);
    all.push("127.0.0.1");
    let c = spawn(&all).wait_bounded(Duration::from_secs(180), "client");
    let s = s.wait_bounded(Duration::from_secs(30), "server");
    (s, c)
}

const HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// Rows: bytes, iterations, then the seven figures.
fn rows(stdout: &str) -> Vec<Vec<f64>> {
    assert!(
        stdout.lines().any(|l| l == HEADER),
        "no perftest latency header in:\n{stdout}"
    );
    stdout
        .lines()
        .filter(|l| l.starts_with(' ') && l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().map(|f| f.parse().unwrap()).collect())
        .collect()
}

fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn default_run_prints_the_perftest_latency_table() {
    let (s, c) = pair(&["-n", "300"]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let r = rows(&text(&c.stdout));
    assert_eq!(r.len(), 1);
    let row = &r[0];
    assert_eq!((row[0], row[1]), (2.0, 300.0));
    let (min, max, typical, avg, stdev, p99, p999) =
        (row[2], row[3], row[4], row[5], row[6], row[7], row[8]);
    assert!(
        min > 0.0 && min <= typical && typical <= p99 && p99 <= p999 && p999 <= max,
        "{row:?}"
    );
    assert!(min <= avg && avg <= max && stdev >= 0.0, "{row:?}");
    // The server measures and prints its own table, as perftest's
    // write_lat server does: the same count, its own figures.
    let srv = rows(&text(&s.stdout));
    assert_eq!(srv.len(), 1, "{}", text(&s.stdout));
    assert_eq!((srv[0][0], srv[0][1]), (2.0, 300.0));
    assert!(srv[0][2] > 0.0 && srv[0][2] <= srv[0][5], "{:?}", srv[0]);
    assert!(text(&c.stderr).contains("RDMA_Write Latency Test"));
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn all_sizes_sweep_with_every_row() {
    let (s, c) = pair(&["-a", "-n", "5"]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let r = rows(&text(&c.stdout));
    let sizes: Vec<u64> = r.iter().map(|x| x[0] as u64).collect();
    assert_eq!(sizes, (1..=23).map(|i| 1u64 << i).collect::<Vec<_>>());
    assert!(r.iter().all(|x| x[1] == 5.0 && x[2] > 0.0));
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn every_clock_choice_names_its_source_and_measures_ordered_figures() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let auto = if cfg!(target_arch = "x86_64") && engine::bench::clock::invariant_tsc(&cpuinfo) {
        "tsc"
    } else {
        "monotonic"
    };
    for (choice, source, chosen_by, banner) in [
        ("tsc", "tsc", "--clock", "TSC (rdtsc"),
        ("monotonic", "monotonic", "--clock", "CLOCK_MONOTONIC"),
        ("auto", auto, "auto", "(auto)"),
    ] {
        let (s, c) = pair(&["-n", "300", "--clock", choice, "--json", "-"]);
        assert_ok(&c, "client");
        assert_ok(&s, "server");
        let err = text(&c.stderr);
        assert!(
            err.contains(" Clock           : ") && err.contains(banner),
            "{choice}: {err}"
        );
        let lines = json_lines(&text(&c.stdout));
        let v = &lines[0];
        assert_eq!(v["clock"]["source"], source, "--clock {choice}");
        assert_eq!(v["clock"]["chosen_by"], chosen_by, "--clock {choice}");
        assert!(v["clock"]["read_cost_ns"].as_f64().unwrap() > 0.0);
        match v["clock"].get("tsc_mhz") {
            Some(mhz) if source == "tsc" => {
                let mhz = mhz.as_f64().unwrap();
                assert!(mhz.is_finite() && mhz > 0.0, "tsc_mhz {mhz}");
            }
            None if source == "monotonic" => {}
            other => panic!("--clock {choice}: tsc_mhz {other:?} with source {source}"),
        }
        let r = &v["result"];
        assert_eq!(r["iterations"], 300, "--clock {choice}");
        let f = |k: &str| r[k].as_f64().unwrap();
        assert!(f("t_min_us") > 0.0, "--clock {choice}: {r}");
        assert!(f("t_min_us") <= f("p50_us") && f("p50_us") <= f("p99_us"));
        assert!(f("p99_us") <= f("t_max_us"), "--clock {choice}: {r}");
    }
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn json_carries_ordered_percentiles_count_and_a_histogram_that_round_trips() {
    let (s, c) = pair(&["-n", "400", "-s", "64", "--json", "-", "--json-histogram"]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let lines = json_lines(&text(&c.stdout));
    assert_eq!(lines.len(), 1);
    let v = &lines[0];
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["kind"], "write_lat");
    assert_eq!(v["config"]["iters"], 400);
    assert_eq!(v["local"]["device"], test_device().as_str());
    assert!(v["clock"]["read_cost_ns"].as_f64().unwrap() > 0.0);
    let r = &v["result"];
    assert_eq!(r["bytes"], 64);
    assert_eq!(r["iterations"], 400, "count = iterations");
    let f = |k: &str| r[k].as_f64().unwrap();
    assert!(f("t_min_us") <= f("p50_us"));
    assert!(f("p50_us") <= f("p90_us") && f("p90_us") <= f("p99_us"));
    assert!(f("p99_us") <= f("p99_9_us") && f("p99_9_us") <= f("p99_99_us"));
    assert!(f("p99_99_us") <= f("t_max_us"));
    assert_eq!(f("t_typical_us"), f("p50_us"));
    assert_eq!(r["exact_percentiles"], true);
    let h = engine::results::lat::histogram_from_base64(v["histogram"].as_str().unwrap()).unwrap();
    assert_eq!(h.len(), 400);
    // The histogram holds round trips in ns; the report shows half, in µs.
    let p99_hist = h.value_at_quantile(0.99) as f64 / 2000.0;
    assert!(
        (p99_hist - f("p99_us")).abs() <= 0.01 * f("p99_us") + 0.01,
        "{p99_hist} vs {}",
        f("p99_us")
    );
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn duration_mode_reports_percentiles() {
    let (s, c) = pair(&["-D", "3", "-f", "1", "--json", "-"]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let v = &json_lines(&text(&c.stdout))[0];
    let r = &v["result"];
    assert!(r["iterations"].as_u64().unwrap() > 10, "{r}");
    for k in ["p50_us", "p90_us", "p99_us", "p99_9_us", "t_stdev_us"] {
        assert!(r[k].is_number(), "{k} missing in duration mode: {r}");
    }
    assert!(r["p99_us"].as_f64().unwrap() >= r["p50_us"].as_f64().unwrap());
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn report_histogram_dumps_every_sample() {
    let (s, c) = pair(&["-n", "50", "-H"]);
    assert_ok(&c, "client");
    assert_ok(&s, "server");
    let out = text(&c.stdout);
    assert!(out.contains("#bytes #sample  rtt/2[usec]"), "{out}");
    let samples = out
        .lines()
        .skip_while(|l| !l.starts_with("#bytes #sample"))
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count();
    assert_eq!(samples, 50, "{out}");
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn max_latency_verdict_passes_and_fails() {
    let (_, c) = pair(&[
        "-n",
        "200",
        "--max-latency",
        "1000000",
        "--percentile",
        "p99",
    ]);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stderr));
    let out = text(&c.stdout);
    assert!(
        out.lines().any(|l| l.starts_with("verdict: PASS p99")),
        "{out}"
    );

    let (_, c) = pair(&["-n", "200", "--max-latency", "0.001", "--json", "-"]);
    assert_eq!(c.status.code(), Some(3), "{}", text(&c.stderr));
    let lines = json_lines(&text(&c.stdout));
    let verdict = lines
        .iter()
        .find(|v| v["kind"] == "verdict")
        .expect("verdict line");
    assert_eq!(verdict["verdict"]["pass"], false);
    assert_eq!(verdict["verdict"]["percentile"], "median");
}

/// Regression test for a start-barrier race (fixed in 9897d1c): the server
/// answered the client's start barrier and only then zeroed the area the
/// client writes into, so a first RDMA WRITE landing in between was wiped
/// and both sides waited for ever (until `--timeout`). Here every control
/// message the server sends after its first one (the configuration answer)
/// returns 300 ms late (strace's system-call fault injection on `sendto`):
/// the client's first write then lands while the server is still in its
/// barrier reply. Both sides must finish every round trip.
#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn a_late_barrier_reply_from_the_server_loses_no_message() {
    let dev = test_device();
    let port = free_port().to_string();
    let strace = ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("strace not found: this test needs it (scripts/setup installs it)");
    let mut args = vec![
        "-qq",
        "-o",
        "/dev/null",
        "--seccomp-bpf",
        "-f",
        "-e",
        "trace=sendto",
        "-e",
        "inject=sendto:delay_exit=300000:when=2+",
        env!("CARGO_BIN_EXE_write_lat"),
    ];
    args.extend(server_args(&dev, &port));
    let s = Reaper::spawn(strace, &args);
    let c = spawn(&[
        "-d",
        &dev,
        "-p",
        &port,
        "-u",
        "18",
        "--timeout",
        "10",
        "-n",
        "200",
        "127.0.0.1",
    ])
    .wait_bounded(Duration::from_secs(120), "client");
    let s = s.wait_bounded(Duration::from_secs(30), "server");
    assert_ok(&c, "client");
    assert_ok(&s, "server (under strace)");
    let r = rows(&text(&c.stdout));
    assert_eq!(r.len(), 1);
    assert_eq!((r[0][0], r[0][1]), (2.0, 200.0));
    let srv = rows(&text(&s.stdout));
    assert_eq!((srv[0][0], srv[0][1]), (2.0, 200.0), "{}", text(&s.stdout));
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn client_exits_nonzero_within_the_timeout_when_the_server_dies_mid_run() {
    let dev = test_device();
    let port = free_port().to_string();
    let s = server(&dev, &port);
    let c = spawn(&[
        "-d",
        &dev,
        "-p",
        &port,
        "--timeout",
        "4",
        "-n",
        "100000000",
        "127.0.0.1",
    ]);
    assert_client_fails_soon_after_the_server_dies(s, c);
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn flags_the_device_refuses_exit_2_naming_them() {
    let dev = test_device();
    let port = free_port().to_string();
    // The flags judged before any device is opened are checked on the
    // host (tests/cli.rs); these need the device's answer.
    let cases: &[(&[&str], &str)] = &[
        (&["-I", "100000"], "--inline-size"),
        (&["-x", "99"], "--gid-index"),
    ];
    assert_each_bad_flag_exits_2(
        env!("CARGO_BIN_EXE_write_lat"),
        &["-d", &dev, "-p", &port],
        cases,
    );
}
