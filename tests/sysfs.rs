//! `rdmaperf::sysfs` and `engine::fabric::link` over the sysfs fixture trees in `tests/fixtures/sysfs/`
//! (see the README there). Tests that change counters between two
//! snapshots work on a copy in a temporary directory.

use std::fs;
use std::path::Path;

mod support;

use support::{TempDir, fixture};

use engine::fabric::link::{CounterRise, ExpectRate, LinkError, VerdictInput, evaluate, rises};
use rdmaperf::sysfs::{PortView, Sysfs};

/// Port `port` of `device` in the sysfs below `root`.
fn port(root: &Path, device: &str, port: u8) -> PortView {
    Sysfs::at(root).port(device, port)
}

/// Writes `value` and a newline into a counter file below the port.
fn set(root: &Path, device: &str, counter: &str, value: &str) {
    fs::write(
        port(root, device, 1).dir().join(counter),
        format!("{value}\n"),
    )
    .unwrap();
}

/// The verdict for a run on `device` port 1 of `root` that measured
/// `measured` Gb/s, with counters read before and after `during` ran.
fn run(
    root: &Path,
    device: &str,
    expect: ExpectRate,
    measured: f64,
    directions: u32,
    during: impl FnOnce(),
) -> engine::results::verdict::Verdict {
    let before = port(root, device, 1).error_counters();
    during();
    let after = port(root, device, 1).error_counters();
    evaluate(&VerdictInput {
        expect,
        negotiated: port(root, device, 1).rate().ok(),
        min_efficiency: 0.9,
        measured_gbps: measured,
        directions,
        rises: rises(&before, &after),
    })
}

const PMA_ERRORS: [&str; 12] = [
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
];

#[test]
fn port_dir_is_the_kernel_layout() {
    assert_eq!(
        port(Path::new("/sys"), "mlx5_0", 1).dir(),
        Path::new("/sys/class/infiniband/mlx5_0/ports/1")
    );
}

#[test]
fn ndr_rate_is_read_and_trimmed() {
    let r = port(&fixture("sysfs/ndr"), "mlx5_0", 1).rate().unwrap();
    assert_eq!(r.gbps, 400.0);
    assert_eq!(r.text, "400 Gb/sec (4X NDR)");
}

#[test]
fn ndr_snapshot_holds_only_error_counters() {
    let snap = port(&fixture("sysfs/ndr"), "mlx5_0", 1).error_counters();
    let mut expected: Vec<String> = PMA_ERRORS.iter().map(|n| format!("counters/{n}")).collect();
    expected.extend(
        [
            "duplicate_request",
            "local_ack_timeout_err",
            "out_of_sequence",
            "packet_seq_err",
            "req_cqe_error",
            "rnr_nak_retry_err",
        ]
        .iter()
        .map(|n| format!("hw_counters/{n}")),
    );
    expected.sort();
    let keys: Vec<String> = snap.counters.keys().cloned().collect();
    assert_eq!(keys, expected);
    assert!(snap.counters.values().all(|&v| v == 0));
}

#[test]
fn ndr_port_passes_at_381_gbps() {
    let v = run(
        &fixture("sysfs/ndr"),
        "mlx5_0",
        ExpectRate::Auto,
        381.2,
        1,
        || {},
    );
    assert!(v.pass, "{v:?}");
    assert_eq!(
        v.line(),
        "verdict: PASS measured 381.20 Gb/s >= threshold 360.00 Gb/s \
         (0.90 x 400 Gb/s expected; negotiated 400 Gb/sec (4X NDR))"
    );
    let v = run(
        &fixture("sysfs/ndr"),
        "mlx5_0",
        ExpectRate::Gbps(400.0),
        381.2,
        1,
        || {},
    );
    assert!(v.pass, "{v:?}");
}

#[test]
fn ndr_port_fails_at_300_gbps() {
    let v = run(
        &fixture("sysfs/ndr"),
        "mlx5_0",
        ExpectRate::Auto,
        300.0,
        1,
        || {},
    );
    assert!(!v.pass);
    assert_eq!(v.reasons, ["measured 300.00 Gb/s < threshold 360.00 Gb/s"]);
    assert!(
        v.line()
            .starts_with("verdict: FAIL measured 300.00 Gb/s < threshold 360.00 Gb/s")
    );
}

#[test]
fn hdr_trained_down_to_2x_fails_against_expect_rate_200() {
    let root = fixture("sysfs/hdr-2x");
    let v = run(&root, "mlx5_1", ExpectRate::Gbps(200.0), 99.0, 1, || {});
    assert!(!v.pass);
    assert_eq!(v.negotiated_gbps, Some(100.0));
    let trained_down = "link trained down: negotiated 100 Gb/s (2X HDR) < expected 200 Gb/s";
    assert!(
        v.reasons.iter().any(|r| r == trained_down),
        "{:?}",
        v.reasons
    );
    assert!(v.line().contains(trained_down), "{}", v.line());
    // With auto, 99 Gb/s on a 100 Gb/s link is within 0.9: the trained-down
    // link is only caught when the expected rate is given.
    let v = run(&root, "mlx5_1", ExpectRate::Auto, 99.0, 1, || {});
    assert!(v.pass, "{v:?}");
}

#[test]
fn rising_symbol_error_fails_but_rising_data_counters_do_not() {
    let t = TempDir::copy_of("link", &fixture("sysfs/ndr"));
    let v = run(t.root(), "mlx5_0", ExpectRate::Auto, 381.2, 1, || {
        set(t.root(), "mlx5_0", "counters/symbol_error", "12");
        set(t.root(), "mlx5_0", "counters/port_xmit_data", "99999999999");
        set(t.root(), "mlx5_0", "counters/port_rcv_packets", "99999999");
        set(t.root(), "mlx5_0", "hw_counters/rx_write_requests", "99999");
    });
    assert!(!v.pass);
    assert_eq!(
        v.reasons,
        ["error counter counters/symbol_error rose 0 -> 12"]
    );
    assert!(
        v.line()
            .ends_with("; error counter counters/symbol_error rose 0 -> 12"),
        "{}",
        v.line()
    );

    let t = TempDir::copy_of("link", &fixture("sysfs/ndr"));
    let v = run(t.root(), "mlx5_0", ExpectRate::Auto, 381.2, 1, || {
        set(t.root(), "mlx5_0", "counters/port_xmit_data", "99999999999");
        set(t.root(), "mlx5_0", "counters/port_xmit_wait", "99999999");
        set(t.root(), "mlx5_0", "hw_counters/lifespan", "20");
    });
    assert!(v.pass, "{v:?}");
}

#[test]
fn siw_names_its_netdev_nowhere_and_is_matched_by_the_mac_behind_its_guid() {
    let root = fixture("sysfs/siw");
    let devices = Sysfs::at(&root).devices(None, None).unwrap();
    let [siw] = &devices[..] else {
        panic!("{devices:?}")
    };
    assert_eq!(siw.node_type.as_deref(), Some("4: RNIC"));
    assert!(siw.is_iwarp());
    assert_eq!(siw.ports[0].netdev.as_deref(), Some("veth2"));
    // Its GID (no gid_attrs/ndevs) is the netdev's too.
    assert_eq!(siw.ports[0].gids[0].netdev.as_deref(), Some("veth2"));
    // Two interfaces with that MAC would be no answer.
    let two = TempDir::copy_of("siw-two-macs", &root);
    std::fs::copy(
        two.path("class/net/veth2/address"),
        two.path("class/net/veth3/address"),
    )
    .unwrap();
    let devices = Sysfs::at(two.root()).devices(None, None).unwrap();
    assert_eq!(devices[0].ports[0].netdev, None);
}

#[test]
fn rxe_layout_has_hw_counters_only() {
    let root = fixture("sysfs/rxe");
    let r = port(&root, "rxe0", 1).rate().unwrap();
    assert_eq!((r.gbps, r.text.as_str()), (10.0, "10 Gb/sec (1X FDR10)"));
    let snap = port(&root, "rxe0", 1).error_counters();
    let keys: Vec<&str> = snap.counters.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "hw_counters/completer_retry_err",
            "hw_counters/duplicate_request",
            "hw_counters/link_downed",
            "hw_counters/out_of_seq_request",
            "hw_counters/rcvd_rnr_err",
            "hw_counters/rcvd_seq_err",
            "hw_counters/retry_exceeded_err",
            "hw_counters/retry_rnr_exceeded_err",
            "hw_counters/send_err",
            "hw_counters/send_rnr_err",
        ]
    );
}

#[test]
fn rxe_out_of_seq_request_rising_fails() {
    let t = TempDir::copy_of("link", &fixture("sysfs/rxe"));
    let v = run(t.root(), "rxe0", ExpectRate::Auto, 9.5, 1, || {
        set(t.root(), "rxe0", "hw_counters/out_of_seq_request", "4");
    });
    assert!(!v.pass);
    assert_eq!(
        v.reasons,
        ["error counter hw_counters/out_of_seq_request rose 0 -> 4"]
    );
}

#[test]
fn rxe_traffic_counters_rising_are_ignored() {
    let t = TempDir::copy_of("link", &fixture("sysfs/rxe"));
    let v = run(t.root(), "rxe0", ExpectRate::Auto, 9.5, 1, || {
        for (name, value) in [
            ("rdma_sends", "5000"),
            ("rdma_recvs", "5000"),
            ("sent_pkts", "9999999"),
            ("rcvd_pkts", "9999999"),
            ("ack_deferred", "77"),
            ("lifespan", "11"),
        ] {
            set(t.root(), "rxe0", &format!("hw_counters/{name}"), value);
        }
    });
    assert!(v.pass, "{v:?}");
}

#[test]
fn na_no_pma_values_are_skipped() {
    let root = fixture("sysfs/old-kernel");
    let snap = port(&root, "qib0", 1).error_counters();
    let keys: Vec<&str> = snap.counters.keys().map(String::as_str).collect();
    assert_eq!(keys, ["counters/port_rcv_errors", "counters/symbol_error"]);
    assert_eq!(snap.counters["counters/port_rcv_errors"], 3);
    let v = run(&root, "qib0", ExpectRate::Auto, 51.0, 1, || {});
    assert!(v.pass, "{v:?}");
}

#[test]
fn unreadable_and_garbled_counters_are_skipped() {
    let t = TempDir::copy_of("link", &fixture("sysfs/ndr"));
    let dir = port(t.root(), "mlx5_0", 1).dir();
    // A counter that cannot be read as a file, and one that is not a number.
    fs::remove_file(dir.join("counters/symbol_error")).unwrap();
    fs::create_dir(dir.join("counters/symbol_error")).unwrap();
    set(t.root(), "mlx5_0", "counters/link_downed", "garbage");
    set(t.root(), "mlx5_0", "counters/port_rcv_errors", "-1");
    let snap = port(t.root(), "mlx5_0", 1).error_counters();
    assert!(!snap.counters.contains_key("counters/symbol_error"));
    assert!(!snap.counters.contains_key("counters/link_downed"));
    assert!(!snap.counters.contains_key("counters/port_rcv_errors"));
    assert!(snap.counters.contains_key("counters/VL15_dropped"));
}

#[test]
fn missing_port_has_no_counters_and_a_rate_error_naming_the_file() {
    let root = fixture("sysfs/ndr");
    assert!(
        port(&root, "mlx5_0", 2)
            .error_counters()
            .counters
            .is_empty()
    );
    assert!(
        port(&root, "nosuch", 1)
            .error_counters()
            .counters
            .is_empty()
    );
    let e = port(&root, "mlx5_0", 2).rate().unwrap_err();
    assert!(matches!(e, LinkError::ReadRate { .. }));
    let msg = e.to_string();
    let path = port(&root, "mlx5_0", 2).dir().join("rate");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn unknown_rate_with_auto_fails() {
    let t = TempDir::copy_of("link", &fixture("sysfs/ndr"));
    fs::remove_file(port(t.root(), "mlx5_0", 1).dir().join("rate")).unwrap();
    let v = run(t.root(), "mlx5_0", ExpectRate::Auto, 381.2, 1, || {});
    assert!(!v.pass);
    assert_eq!(v.negotiated_gbps, None);
    assert!(
        v.reasons[0].contains("expected rate unknown"),
        "{:?}",
        v.reasons
    );
    // An explicit rate still gives a verdict.
    let v = run(t.root(), "mlx5_0", ExpectRate::Gbps(400.0), 381.2, 1, || {});
    assert!(v.pass, "{v:?}");
}

#[test]
fn garbled_rate_file_error_names_file_and_text() {
    let t = TempDir::copy_of("link", &fixture("sysfs/ndr"));
    set(t.root(), "mlx5_0", "rate", "fast");
    let e = port(t.root(), "mlx5_0", 1).rate().unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("\"fast\""), "{msg}");
    let path = port(t.root(), "mlx5_0", 1).dir().join("rate");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn bidirectional_expects_twice_the_rate() {
    let root = fixture("sysfs/ndr");
    let v = run(&root, "mlx5_0", ExpectRate::Auto, 700.0, 2, || {});
    assert!(!v.pass);
    assert_eq!(v.threshold_gbps, Some(720.0));
    assert_eq!(v.reasons, ["measured 700.00 Gb/s < threshold 720.00 Gb/s"]);
    assert!(
        v.line().contains("(0.90 x 2 x 400 Gb/s expected;"),
        "{}",
        v.line()
    );
    let v = run(&root, "mlx5_0", ExpectRate::Auto, 762.4, 2, || {});
    assert!(v.pass, "{v:?}");
}

#[test]
fn verdict_serialises_for_json_reports() {
    let v = run(
        &fixture("sysfs/hdr-2x"),
        "mlx5_1",
        ExpectRate::Gbps(200.0),
        99.0,
        1,
        || {},
    );
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["pass"], false);
    assert_eq!(json["expected_gbps"], 200.0);
    assert_eq!(json["negotiated_gbps"], 100.0);
    assert_eq!(json["negotiated_text"], "100 Gb/sec (2X HDR)");
    assert_eq!(json["reasons"].as_array().unwrap().len(), 2);
    let rise = CounterRise {
        name: "counters/symbol_error".into(),
        before: 0,
        after: 12,
    };
    assert_eq!(
        serde_json::to_value(&rise).unwrap(),
        serde_json::json!({"name": "counters/symbol_error", "before": 0, "after": 12})
    );
}

// The `Sysfs` value's rules, on `machine/` (a NIC on NUMA node 1 of two,
// one without a node, two interfaces, a GPU and a peer-memory module).

#[test]
fn only_slash_sys_is_the_live_sysfs() {
    assert!(Sysfs::live().is_live());
    assert_eq!(Sysfs::default(), Sysfs::live());
    assert_eq!(Sysfs::live().root(), Path::new("/sys"));
    assert!(Sysfs::at("/sys").is_live());
    let tree = Sysfs::at(fixture("sysfs/machine"));
    assert!(!tree.is_live());
    assert_eq!(tree.root(), fixture("sysfs/machine"));
}

#[test]
fn a_port_view_reads_its_own_port() {
    let view = Sysfs::at(fixture("sysfs/machine")).port("mlx5_0", 1);
    assert_eq!((view.device(), view.port()), ("mlx5_0", 1));
    assert_eq!(
        view.dir(),
        fixture("sysfs/machine/class/infiniband/mlx5_0/ports/1")
    );
    assert_eq!(view.rate_text().as_deref(), Some("400 Gb/sec (4X NDR)"));
    assert_eq!(
        Sysfs::at(fixture("sysfs/machine")).rate_text("mlx5_0", 1),
        view.rate_text()
    );
    // Error counters only, numbers only (`N/A (no PMA)` is left out).
    let snap = view.error_counters();
    let keys: Vec<&str> = snap.counters.keys().map(String::as_str).collect();
    assert_eq!(keys, ["counters/symbol_error"]);
    // -W's counters: any file below the port, named in the error.
    assert_eq!(view.counter("counters/port_xmit_data"), Ok(1234));
    let e = view.counter("counters/port_rcv_errors").unwrap_err();
    assert!(
        e.contains("port_rcv_errors") && e.contains("not a number"),
        "{e}"
    );
    let e = view.counter("counters/nonesuch").unwrap_err();
    assert!(
        e.starts_with("cannot read counter counters/nonesuch ("),
        "{e}"
    );
    // --prom's port: the device with this port alone.
    let state = view.state();
    assert_eq!(state.len(), 1);
    assert_eq!(state[0].name, "mlx5_0");
    assert_eq!(state[0].ports.len(), 1);
    assert_eq!(state[0].ports[0].state.as_deref(), Some("ACTIVE"));
}

#[test]
fn a_port_sysfs_does_not_show_reads_as_nothing() {
    let sysfs = Sysfs::at(fixture("sysfs/machine"));
    for view in [sysfs.port("nonesuch", 1), sysfs.port("mlx5_0", 2)] {
        assert!(view.state().iter().all(|d| d.ports.is_empty()), "{view:?}");
        assert!(view.error_counters().counters.is_empty());
        assert_eq!(view.rate_text(), None);
        assert!(matches!(view.rate(), Err(LinkError::ReadRate { .. })));
    }
}

#[test]
fn every_reading_is_taken_when_asked_never_cached() {
    // A before/after delta and a file rewritten after every size need
    // the counters as they are now.
    let t = TempDir::copy_of("sysfs-fresh", &fixture("sysfs/machine"));
    let view = Sysfs::at(t.root()).port("mlx5_0", 1);
    let before = view.error_counters();
    let state_before = view.state();
    set(t.root(), "mlx5_0", "counters/symbol_error", "9");
    set(t.root(), "mlx5_0", "counters/port_xmit_data", "5678");
    set(t.root(), "mlx5_0", "state", "DOWN");
    assert_eq!(before.counters["counters/symbol_error"], 7);
    assert_eq!(view.error_counters().counters["counters/symbol_error"], 9);
    assert_eq!(view.counter("counters/port_xmit_data"), Ok(5678));
    assert_eq!(state_before[0].ports[0].state.as_deref(), Some("ACTIVE"));
    assert_eq!(view.state()[0].ports[0].state.as_deref(), Some("DOWN"));
}

#[test]
fn the_nics_numa_node_and_the_cpu_lists_are_read_as_the_kernel_words_them() {
    let sysfs = Sysfs::at(fixture("sysfs/machine"));
    assert_eq!(sysfs.nic_node("mlx5_0"), Some(1));
    // `-1`: the kernel knows no node; a device that is not there: none.
    assert_eq!(sysfs.nic_node("rxe0"), None);
    assert_eq!(sysfs.nic_node("nonesuch"), None);
    assert_eq!(sysfs.node_cpulist(0).as_deref(), Some("0-3"));
    assert_eq!(sysfs.node_cpulist(1).as_deref(), Some("4-7"));
    assert_eq!(sysfs.node_cpulist(2), None);
    assert_eq!(sysfs.online_cpulist().as_deref(), Some("0-7"));
}

#[test]
fn interfaces_gpus_and_modules_are_what_the_tree_shows() {
    let sysfs = Sysfs::at(fixture("sysfs/machine"));
    let nets = sysfs.net_interfaces();
    let seen: Vec<(&str, Option<&str>, Option<&str>)> = nets
        .iter()
        .map(|n| (n.name.as_str(), n.operstate.as_deref(), n.flags.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("eth0", Some("up"), Some("0x1003")),
            ("lo", Some("unknown"), Some("0x9"))
        ]
    );
    // Only PCI addresses count as bound devices (not `bind`, `new_id`).
    assert_eq!(sysfs.nvidia_devices(), 1);
    assert!(sysfs.has_module("nvidia_peermem"));
    assert!(!sysfs.has_module("nv_peer_mem"));
    let empty = Sysfs::at(fixture("sysfs/ndr"));
    assert!(empty.net_interfaces().is_empty());
    assert_eq!(empty.nvidia_devices(), 0);
}
