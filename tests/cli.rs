//! The binaries, run as a user would. Tests marked `#[ignore]` need an RDMA
//! device (`RDMAPERF_TEST_DEVICE`); the rest run anywhere.

mod support;

use std::process::{Command, Output};

use support::{assert_each_bad_flag_exits_2, free_port, test_device};

fn run(bin: &str, args: &[&str]) -> Output {
    let path = match bin {
        "write_bw" => env!("CARGO_BIN_EXE_write_bw"),
        "write_lat" => env!("CARGO_BIN_EXE_write_lat"),
        "read_bw" => env!("CARGO_BIN_EXE_read_bw"),
        "read_lat" => env!("CARGO_BIN_EXE_read_lat"),
        other => panic!("unknown binary {other}"),
    };
    Command::new(path)
        .args(args)
        .output()
        .expect("spawn binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_names_perftest_flags() {
    for bin in ["write_bw", "write_lat", "read_bw", "read_lat"] {
        let out = run(bin, &["--help"]);
        assert!(out.status.success());
        let help = text(&out.stdout);
        for flag in [
            "--ib-dev",
            "--ib-port",
            "--gid-index",
            "--size",
            "--iters",
            "--duration",
            "--list-devices",
            "--json",
            "--timeout",
        ] {
            assert!(help.contains(flag), "{bin} --help lacks {flag}");
        }
    }
}

#[test]
fn port_zero_is_a_usage_error() {
    let out = run("write_bw", &["--list-devices", "-i", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--ib-port"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_test_flags_exit_2_naming_the_flag_before_touching_a_device() {
    let cases: [(&str, &[&str], &str); 11] = [
        ("write_bw", &["-s", "0", "127.0.0.1"], "--size"),
        ("write_bw", &["-t", "0", "127.0.0.1"], "--tx-depth"),
        ("write_bw", &["-a", "-D", "5", "127.0.0.1"], "--duration"),
        ("write_lat", &["-s", "0", "127.0.0.1"], "--size"),
        ("write_lat", &["-n", "2", "127.0.0.1"], "--iters"),
        (
            "write_lat",
            &["--percentile", "p101", "127.0.0.1"],
            "--percentile",
        ),
        ("write_lat", &["--clock", "rdtsc", "127.0.0.1"], "--clock"),
        // A flag of another test is refused, named, before the device.
        ("read_lat", &["-b", "127.0.0.1"], "-b/--bidirectional"),
        ("read_bw", &["-I", "64", "127.0.0.1"], "-I/--inline-size"),
        ("write_bw", &["-o", "4", "127.0.0.1"], "-o/--outs"),
        ("read_bw", &["-o", "0", "127.0.0.1"], "--outs"),
    ];
    for (bin, args, flag) in cases {
        let out = run(bin, args);
        assert_eq!(out.status.code(), Some(2), "{bin} {args:?}");
        assert!(
            text(&out.stderr).contains(flag),
            "{bin} {args:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn list_devices_shows_ports_and_gids() {
    let dev = test_device();
    for bin in ["write_bw", "write_lat"] {
        let out = run(bin, &["--list-devices", "-d", &dev]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with(&format!("{dev}  node_guid ")),
            "{stdout}"
        );
        assert!(stdout.contains("  port 1  ACTIVE  "), "{stdout}");
        assert!(stdout.contains("    gid 0 "), "{stdout}");
        assert!(out.stderr.is_empty(), "stderr: {}", text(&out.stderr));
    }
    // Without -d, every device is listed, ours among them.
    let out = run("write_bw", &["--list-devices"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains(&format!("{dev}  node_guid ")));
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn list_devices_json_lines_parse() {
    let dev = test_device();
    let out = run(
        "write_bw",
        &["--list-devices", "-d", &dev, "-i", "1", "--json", "-"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["name"], dev.as_str());
    assert_eq!(v["ports"].as_array().unwrap().len(), 1);
    let port = &v["ports"][0];
    assert_eq!(port["port"], 1);
    assert_eq!(port["state"], "ACTIVE");
    assert!(port["active_mtu"].as_u64().unwrap() >= 256);
    let gids = port["gids"].as_array().unwrap();
    assert!(!gids.is_empty());
    assert!(["IB", "RoCE v1", "RoCE v2"].contains(&gids[0]["type"].as_str().unwrap()));
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn unknown_device_and_port_exit_2_naming_them_and_leave_nothing() {
    let dev = test_device();
    let json = std::env::temp_dir().join(format!("rdmaperf-cli-{}.json", std::process::id()));
    let json_arg = json.to_str().unwrap();
    let out = run(
        "write_bw",
        &["--list-devices", "-d", "nosuch9", "--json", json_arg],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("nosuch9") && err.contains(&dev), "{err}");
    assert!(out.stdout.is_empty());
    assert!(!json.exists(), "a failed run left {json:?} behind");

    let out = run("write_lat", &["--list-devices", "-d", &dev, "-i", "7"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("port 7") && err.contains(&dev), "{err}");
}

#[test]
#[ignore = "needs an RDMA device: RDMAPERF_TEST_DEVICE (scripts/test runs it on soft-RoCE)"]
fn a_closed_stdout_ends_the_run_quietly_with_exit_0() {
    let dev = test_device();
    // `write_bw --list-devices | head -0`: the reader is gone before the
    // first write, which fails with EPIPE.
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_write_bw"))
        .args(["--list-devices", "-d", &dev])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("spawn write_bw");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "stderr: {}", text(&out.stderr));
}

/// The message of a host without RDMA devices, as `rdmaperf ports` words it
/// for the directory `dir`.
fn no_devices(dir: &str) -> String {
    format!("no RDMA devices in {dir} (is the driver loaded? for soft-RoCE: rdma link add)")
}

const TEST_BINARIES: [(&str, &str); 7] = [
    ("write_bw", env!("CARGO_BIN_EXE_write_bw")),
    ("write_lat", env!("CARGO_BIN_EXE_write_lat")),
    ("read_bw", env!("CARGO_BIN_EXE_read_bw")),
    ("read_lat", env!("CARGO_BIN_EXE_read_lat")),
    ("send_bw", env!("CARGO_BIN_EXE_send_bw")),
    ("send_lat", env!("CARGO_BIN_EXE_send_lat")),
    ("atomic_bw", env!("CARGO_BIN_EXE_atomic_bw")),
];

/// Runs every test binary, as a server and with `--list-devices`, with
/// `env` added: each must print `<name>: error: <want>` alone on stderr,
/// nothing on stdout, and exit 1.
fn assert_every_binary_says(env: &[(&str, &str)], want: &str) {
    for (name, path) in TEST_BINARIES {
        for args in [&[][..], &["--list-devices"][..]] {
            let out = Command::new(path)
                .args(args)
                .envs(env.iter().copied())
                .stdin(std::process::Stdio::null())
                .output()
                .expect("spawn binary");
            assert_eq!(
                text(&out.stderr),
                format!("{name}: error: {want}\n"),
                "{name} {args:?}"
            );
            assert!(
                out.stdout.is_empty(),
                "{name} {args:?}: {}",
                text(&out.stdout)
            );
            assert_eq!(out.status.code(), Some(1), "{name} {args:?}");
        }
    }
}

/// First contact on a machine without RDMA: every test binary says what
/// `rdmaperf ports` says, once, and exits 1. libibverbs reads sysfs under
/// `SYSFS_PATH` (default /sys); pointed at an empty directory it finds no
/// kernel RDMA support (ENOSYS), on any host — that part always runs.
/// The same on this host's own /sys runs when it has no RDMA device
/// (CI, the host of scripts/test); on a host with one it is not this
/// case, and only the first part is checked (docs/reliability.md).
#[test]
fn without_rdma_every_binary_says_no_devices_as_ports_does_and_exits_1() {
    let empty = support::TempDir::new("nordma");
    let root = empty.root().to_str().unwrap();
    let dir = format!("{root}/class/infiniband");
    let ports = Command::new(env!("CARGO_BIN_EXE_rdmaperf"))
        .args(["ports", "--sysfs-root", root])
        .output()
        .expect("spawn rdmaperf");
    assert_eq!(
        text(&ports.stderr),
        format!("rdmaperf: error: {}\n", no_devices(&dir))
    );
    assert_eq!(ports.status.code(), Some(1));
    assert_every_binary_says(&[("SYSFS_PATH", root)], &no_devices(&dir));

    let host_has_devices = std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    if !host_has_devices {
        assert_every_binary_says(&[], &no_devices("/sys/class/infiniband"));
    }
}

/// A bad flag (with its value) and the name its error must give.
type BadFlag<'a> = (&'a [&'a str], &'a str);

/// Every flag a test judges before it opens a device (clap's types, the
/// configuration's limits, the flags of other tests), on every binary:
/// exit 2 naming the flag, no results, no connection — here, where there
/// is no device, so none of them waits for one. (The flags only the device
/// can refuse, `-I`, `-x`, `-i`, `-d`, run in the VM: tests/write_bw.rs
/// and tests/write_lat.rs.)
#[test]
fn bad_flags_exit_2_naming_them_before_any_device_or_traffic() {
    let port = free_port().to_string();
    let base = ["-p", port.as_str()];
    let bins: &[(&str, &[BadFlag])] = &[
        (
            env!("CARGO_BIN_EXE_write_bw"),
            &[
                (&["-s", "0"], "--size"),
                (&["-s", "9M"], "--size"),
                (&["-t", "0"], "--tx-depth"),
                (&["-Q", "2000"], "--cq-mod"),
                (&["-q", "2", "--threads", "3"], "--threads"),
                (&["-D", "4", "-f", "2"], "--duration"),
                (&["-n", "3"], "--iters"),
                (&["-m", "1500"], "--mtu"),
                (&["--expect-rate", "fast"], "--expect-rate"),
                (&["--min-efficiency", "1.5"], "--min-efficiency"),
                (&["-s", "12Q"], "--size"),
            ],
        ),
        (
            env!("CARGO_BIN_EXE_write_lat"),
            &[
                (&["-s", "0"], "--size"),
                (&["-n", "2"], "--iters"),
                (&["-m", "1500"], "--mtu"),
                (&["--max-latency=0"], "--max-latency"),
                (&["--percentile", "p42"], "--percentile"),
            ],
        ),
        (
            env!("CARGO_BIN_EXE_read_bw"),
            &[
                (&["-I", "64"], "--inline-size"),
                (&["-o", "0"], "--outs"),
                (&["-o", "300"], "--outs"),
                (&["-s", "0"], "--size"),
                (&["-t", "0"], "--tx-depth"),
                (&["--percentile", "p99"], "--percentile"),
                (&["-H"], "--report-histogram"),
            ],
        ),
        (
            env!("CARGO_BIN_EXE_read_lat"),
            &[
                (&["-b"], "--bidirectional"),
                (&["-I", "8"], "--inline-size"),
                (&["-n", "2"], "--iters"),
                (&["--percentile", "p42"], "--percentile"),
                (&["-o", "0"], "--outs"),
            ],
        ),
        (
            env!("CARGO_BIN_EXE_send_bw"),
            &[
                (&["-r", "0"], "-r/--rx-depth"),
                (&["-r", "16385"], "-r/--rx-depth"),
                (&["-A", "FETCH_AND_ADD"], "-A/--atomic_type"),
                (&["--write_with_imm"], "--write_with_imm"),
                (&["-o", "4"], "-o/--outs"),
            ],
        ),
        (
            env!("CARGO_BIN_EXE_atomic_bw"),
            &[
                (&["-s", "16"], "-s/--size"),
                (&["-a"], "-a/--all"),
                (&["-A", "SWAP"], "CMP_AND_SWAP"),
                (&["-I", "8"], "-I/--inline-size"),
            ],
        ),
    ];
    for (bin, cases) in bins {
        assert_each_bad_flag_exits_2(bin, &base, cases);
    }
}
