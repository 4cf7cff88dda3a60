//! `rdmaperf ports`, `rdmaperf doctor nccl` and `rdmaperf exporter`, run
//! as a user would. Tests marked `#[ignore]` need the RDMA device of
//! `RDMAPERF_TEST_DEVICE` (the soft-RoCE VM; the exporter test also a
//! real Prometheus server, Debian's `prometheus`); the rest run on sysfs
//! fixture trees anywhere.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::exposition::sample;
use support::{
    Reaper, TempDir, assert_promtool_clean, assert_usage_error, fixture, free_port, http_get,
    http_get_with, peers, test_device, text,
};

const RDMAPERF: &str = env!("CARGO_BIN_EXE_rdmaperf");

fn rdmaperf(args: &[&str]) -> Output {
    Command::new(RDMAPERF)
        .args(args)
        .output()
        .expect("spawn rdmaperf")
}

fn fixture_str(path: &str) -> String {
    fixture(path).to_str().unwrap().to_owned()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

// --- the command line -------------------------------------------------------

#[test]
fn help_lists_the_subcommands_and_the_test_binaries() {
    let out = rdmaperf(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for word in [
        "ports",
        "doctor",
        "exporter",
        "write_bw",
        "read_bw",
        "send_bw",
        "atomic_bw",
        "write_lat",
        "read_lat",
        "send_lat",
    ] {
        assert!(help.contains(word), "rdmaperf --help lacks {word}:\n{help}");
    }
}

#[test]
fn cluster_metrics_at_1024_ranks_on_8_rails_are_bounded_and_promtool_clean() {
    use engine::cluster::verdict::{Measurement, Outcome, judge};
    use engine::cluster::{report, schedule};
    // Two rounds of all pairs of 1,024 ranks on 8 rails; rank 17 slow on
    // rail 3, rank 1000 never came.
    let mut all = Vec::new();
    for (i, round) in schedule::all_pairs(1_024)
        .unwrap()
        .rounds
        .iter()
        .take(2)
        .enumerate()
    {
        for p in &round.pairs {
            for rail in 0..8 {
                for (from, to) in [(p.client, p.server), (p.server, p.client)] {
                    let outcome = if from == 1_000 || to == 1_000 {
                        Outcome::PeerMissing
                    } else {
                        Outcome::Measured {
                            msg_rate_mpps: None,
                            bw_gbps: if rail == 3 && (from == 17 || to == 17) {
                                40.0
                            } else {
                                99.0 + f64::from(from % 7) * 0.1
                            },
                            lat_us: None,
                            latency: None,
                        }
                    };
                    all.push(Measurement {
                        round: i as u32,
                        from,
                        to,
                        rail,
                        outcome,
                    });
                }
            }
        }
    }
    let verdict = judge(1_024, &[1_000], &all, &Default::default());
    let hosts: Vec<Option<String>> = (0..1_024)
        .map(|r| (r != 1_000).then(|| format!("gpu-node-{r:04}")))
        .collect();
    let rails: Vec<Vec<String>> = (0..1_024)
        .map(|_| (0..8).map(|k| format!("mlx5_{k}:1")).collect())
        .collect();
    let roster = report::Roster {
        hosts: &hosts,
        devices: &[],
        rails: &rails,
    };
    let names = report::Names::new(roster, 1_024, verdict.rail_count());
    let text = report::metrics(&all, &verdict, &names, 60.0, report::DEFAULT_PROM_WORST).render();
    let series = text.lines().filter(|l| !l.starts_with('#')).count();
    // Per node 1, per node and rail at most 5, per rail 1, the run 7, the
    // 10 worst directions 2 each: not one per direction (32,768 here,
    // 8,380,416 for all rounds).
    assert!(
        series <= 1_024 + 1_024 * 8 * 5 + 8 + 7 + 20,
        "{series} series"
    );
    assert!(
        text.contains(
            "rdmaperf_cluster_node_rail_pass{rank=\"17\",host=\"gpu-node-0017\",rail=\"3\",device=\"mlx5_3:1\",verdict=\"FAIL\"} 0\n"
        ),
        "rank 17's rail 3"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("rdmaperf_cluster_pair_bandwidth_gbps{"))
            .count(),
        report::DEFAULT_PROM_WORST
    );
    assert!(text.contains("rdmaperf_cluster_ranks_missing 1\n"));
    assert_promtool_clean(&text, "cluster metrics at 1,024 ranks on 8 rails");
}

#[test]
fn cluster_metrics_are_promtool_clean_whatever_the_host_names() {
    use engine::cluster::verdict::{Measurement, Outcome, judge};
    use engine::cluster::{report, schedule};
    // Three ranks, all pairs; every direction into rank 2 errs.
    let mut all = Vec::new();
    for (i, round) in schedule::all_pairs(3).unwrap().rounds.iter().enumerate() {
        for p in &round.pairs {
            for (from, to) in [(p.client, p.server), (p.server, p.client)] {
                let outcome = if to == 2 {
                    Outcome::Error {
                        error: "timed out".into(),
                    }
                } else {
                    Outcome::Measured {
                        msg_rate_mpps: None,
                        bw_gbps: 90.0 + f64::from(from),
                        lat_us: Some(3.5),
                        latency: None,
                    }
                };
                all.push(Measurement {
                    round: i as u32,
                    from,
                    to,
                    rail: 0,
                    outcome,
                });
            }
        }
    }
    let verdict = judge(3, &[], &all, &Default::default());
    // Host names as peers send them: quotes, backslashes, a newline.
    let hosts = [
        Some("a\"q".to_owned()),
        Some("b\\s".into()),
        Some("c\nd".into()),
    ];
    let roster = report::Roster {
        hosts: &hosts,
        devices: &[],
        rails: &[],
    };
    let names = report::Names::new(roster, 3, verdict.rail_count());
    let text = report::metrics(&all, &verdict, &names, 1.5, report::DEFAULT_PROM_WORST).render();
    assert!(text.contains("rdmaperf_cluster_pair_pass{"), "{text}");
    assert_promtool_clean(&text, "cluster metrics");
}

#[test]
fn bad_input_exits_2_and_names_what_was_wrong() {
    let missing = fixture_str("no-such-file");
    let tree = fixture_str("sysfs/complete");
    // Each case: the arguments, and every word stderr must name.
    let cases: &[(&[&str], &[&str])] = &[
        (&["frobnicate"], &["frobnicate"]),
        (&["ports", "--no-such-flag"], &["--no-such-flag"]),
        (&["ports", "--watch", "0"], &["--watch"]),
        (&["ports", "--expect-rate", "fast"], &["--expect-rate"]),
        (
            &["doctor", "nccl", "--env-file", &missing],
            &["--env-file", "no-such-file"],
        ),
        (&["doctor", "nccl", "--log", &missing], &["--log"]),
        (&["doctor", "lustre"], &["lustre"]),
        (&["exporter"], &["--listen"]),
        (&["exporter", "--listen", "not-an-address"], &["--listen"]),
        (
            &["ports", "--sysfs-root", &tree, "-d", "mlx9_9"],
            &["mlx9_9"],
        ),
        (&["ports", "--sysfs-root", &tree, "-i", "7"], &["-i"]),
    ];
    for &(args, names) in cases {
        let out = rdmaperf(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "rdmaperf {args:?}: {}",
            text(&out.stderr)
        );
        for named in names {
            assert!(
                text(&out.stderr).contains(named),
                "rdmaperf {args:?}: stderr does not name {named}:\n{}",
                text(&out.stderr)
            );
        }
        assert!(out.stdout.is_empty(), "rdmaperf {args:?} printed on stdout");
    }
}

#[test]
fn an_env_file_line_that_is_not_a_variable_exits_2_with_its_line_number() {
    let dir = TempDir::new("badenv");
    let file = dir.path("nccl.env");
    std::fs::write(&file, "export NCCL_IB_HCA=mlx5\nthis is not a variable\n").unwrap();
    let tree = fixture_str("sysfs/complete");
    let out = rdmaperf(&[
        "doctor",
        "nccl",
        "--sysfs-root",
        &tree,
        "--env-file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains('2'), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
}

// --- ports on fixture trees ----------------------------------------------------

#[test]
fn ports_shows_what_ibstat_and_show_gids_show() {
    let tree = fixture_str("sysfs/complete");
    let out = rdmaperf(&["ports", "--sysfs-root", &tree]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // show_gids' header, its columns as show_gids prints them.
    assert!(
        stdout
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["DEV", "PORT", "INDEX", "GID", "IPv4", "VER", "DEV"]),
        "no show_gids header:\n{stdout}"
    );
    for want in [
        "400 Gb/sec (4X NDR)",
        "200 Gb/sec (2X NDR)",
        "LinkUp",
        "ACTIVE",
        "MT4129",
    ] {
        assert!(stdout.contains(want), "no {want:?} in:\n{stdout}");
    }
}

#[test]
fn ports_on_iwarp_shows_the_netdev_behind_the_guid_and_no_roce_version() {
    // Copied from siw0 in the VM: no gid_attrs/ndevs, types/0 says
    // "IB/RoCE v1" as on every device; an iWARP GID has no RoCE version.
    let tree = fixture_str("sysfs/siw");
    let out = rdmaperf(&["ports", "--sysfs-root", &tree]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.iter().any(|r| r[..]
            == [
                "siw0",
                "1",
                "0",
                "72ef:8020:a3ac:0000:0000:0000:0000:0000",
                "-",
                "veth2"
            ]),
        "no GID row of siw0 on veth2 without a RoCE version:\n{stdout}"
    );
    assert!(
        rows.iter()
            .any(|r| r.first() == Some(&"siw0") && r.get(1..3) == Some(&["4:", "RNIC"][..])),
        "{stdout}"
    );
}

#[test]
fn ports_json_reads_the_kernel_files_as_the_kernel_wrote_them() {
    let tree = fixture("sysfs/complete");
    let out = rdmaperf(&["ports", "--json", "--sysfs-root", tree.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["kind"], "ports");
    let devices = doc["devices"].as_array().unwrap();
    assert!(!devices.is_empty());
    for dev in devices {
        let name = dev["name"].as_str().unwrap();
        let dev_dir = tree.join("class/infiniband").join(name);
        for port in dev["ports"].as_array().unwrap() {
            let n = port["port"].as_u64().unwrap();
            let dir = dev_dir.join("ports").join(n.to_string());
            for file in ["state", "phys_state", "rate", "link_layer"] {
                let raw = std::fs::read_to_string(dir.join(file)).unwrap();
                assert_eq!(port[file], raw.trim(), "{name}/{n} {file}");
            }
            // Every counter file, raw.
            for entry in std::fs::read_dir(dir.join("counters")).unwrap() {
                let entry = entry.unwrap();
                let raw = std::fs::read_to_string(entry.path()).unwrap();
                let key = entry.file_name().into_string().unwrap();
                if let Ok(v) = raw.trim().parse::<u64>() {
                    assert_eq!(port["counters"][&key], v, "{name}/{n} counters/{key}");
                }
            }
            // Every non-zero GID with its type.
            for gid in port["gids"].as_array().unwrap() {
                let i = gid["index"].as_u64().unwrap().to_string();
                let raw = std::fs::read_to_string(dir.join("gids").join(&i)).unwrap();
                assert_eq!(gid["gid"], raw.trim());
                let kind = std::fs::read_to_string(dir.join("gid_attrs/types").join(&i)).unwrap();
                assert_eq!(gid["kind"], kind.trim());
            }
        }
    }
}

#[test]
fn check_fails_the_port_trained_down_among_its_siblings_and_exits_3() {
    let tree = fixture_str("sysfs/complete");
    let out = rdmaperf(&["ports", "--sysfs-root", &tree, "--check", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let doc = json(&out);
    let verdict = &doc["verdict"];
    assert_eq!(verdict["pass"], false);
    let ports = verdict["ports"].as_array().unwrap();
    let failed: Vec<&str> = ports
        .iter()
        .filter(|p| p["pass"] == false)
        .map(|p| p["device"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["mlx5_1"], "{verdict:#}");
    // The same in text, one line per port and a last verdict line.
    let out = rdmaperf(&["ports", "--sysfs-root", &tree, "--expect-rate", "auto"]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("port mlx5_1/1: FAIL rate 200 Gb/sec (2X NDR) below 400 Gb/s"),
        "{stdout}"
    );
    assert!(
        stdout.contains("port mlx5_0/1: PASS ACTIVE LinkUp 400 Gb/sec (4X NDR)"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("verdict: FAIL 1 of 3 ports"));
    // One NDR port held to 400 Gb/s, and counted.
    let out = rdmaperf(&[
        "ports",
        "--sysfs-root",
        &tree,
        "-d",
        "mlx5_0",
        "--expect-rate",
        "400",
        "--expect-ports",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(
        text(&out.stdout).lines().last(),
        Some("verdict: PASS 1 port")
    );
    let out = rdmaperf(&[
        "ports",
        "--sysfs-root",
        &tree,
        "-d",
        "mlx5_0",
        "--expect-ports",
        "8",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stdout).contains("expected 8 ports, found 1"));
}

#[test]
fn watch_shows_the_deltas_and_check_fails_a_rising_error_counter() {
    let tree = TempDir::copy_of("watch", &fixture("sysfs/complete"));
    let root = tree.root();
    let counters = root.join("class/infiniband/mlx5_0/ports/1/counters");
    let read_counter = |name: &str| -> u64 {
        std::fs::read_to_string(counters.join(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let before = read_counter("symbol_error");
    let data_before = read_counter("port_xmit_data");
    let child = Reaper::spawn(
        RDMAPERF,
        &[
            "ports",
            "--sysfs-root",
            root.to_str().unwrap(),
            "-d",
            "mlx5_0",
            "--watch",
            "2",
            "--check",
            "--json",
        ],
    );
    // The first reading is taken at once; change the counters during the
    // interval, as a bad cable and traffic would.
    std::thread::sleep(Duration::from_millis(700));
    std::fs::write(counters.join("symbol_error"), format!("{}\n", before + 3)).unwrap();
    std::fs::write(
        counters.join("port_xmit_data"),
        format!("{}\n", data_before + 1000),
    )
    .unwrap();
    let out = child.wait_bounded(Duration::from_secs(30), "rdmaperf ports --watch 2");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let doc = json(&out);
    let deltas = &doc["counter_deltas"]["deltas"]["mlx5_0"]["1"];
    assert_eq!(deltas["counters/symbol_error"], 3, "{doc:#}");
    assert_eq!(deltas["counters/port_xmit_data"], 1000);
    let reasons = doc["verdict"]["ports"][0]["reasons"].to_string();
    assert!(
        reasons.contains(&format!(
            "error counter counters/symbol_error rose {before} -> {}",
            before + 3
        )),
        "{reasons}"
    );
}

// --- doctor nccl on fixtures ------------------------------------------------------

/// The block of NCCL variables the issue quotes, as people paste it.
const ISSUE_BLOCK: &str = "\
export NCCL_IB_HCA=mlx5
export NCCL_SOCKET_IFNAME=eth0
export NCCL_IB_GID_INDEX=3
export NCCL_IB_TIMEOUT=22
export NCCL_IB_QPS_PER_CONNECTION=4
export NCCL_IB_TC=41
export NCCL_NET_GDR_LEVEL=2
";

fn findings(doc: &serde_json::Value) -> Vec<serde_json::Value> {
    doc["findings"].as_array().cloned().unwrap_or_default()
}

fn has(findings: &[serde_json::Value], severity: &str, variable: &str) -> bool {
    findings
        .iter()
        .any(|f| f["severity"] == severity && f["variable"] == variable)
}

#[test]
fn doctor_reads_a_socket_fallback_log_as_an_error_and_a_healthy_one_as_none() {
    let tree = fixture_str("sysfs/complete");
    let dir = TempDir::new("doclog");
    let env = dir.path("empty.env");
    std::fs::write(&env, "# nothing set\n").unwrap();
    let env = env.to_str().unwrap().to_owned();
    let run = |log: &str| {
        rdmaperf(&[
            "doctor",
            "nccl",
            "--sysfs-root",
            &tree,
            "--env-file",
            &env,
            "--log",
            &fixture_str(log),
            "--json",
        ])
    };
    let bad = run("nccl/socket-fallback.log");
    assert_eq!(bad.status.code(), Some(3), "{}", text(&bad.stderr));
    let doc = json(&bad);
    let all = doc.to_string();
    assert!(all.contains("Socket"), "{doc:#}");
    assert!(
        findings(&doc).iter().any(|f| f["severity"] == "error"),
        "{doc:#}"
    );
    let good = run("nccl/healthy-ib.log");
    assert_eq!(good.status.code(), Some(0), "{}", text(&good.stdout));
    let doc = json(&good);
    assert!(
        !findings(&doc).iter().any(|f| f["severity"] == "error"),
        "{doc:#}"
    );
}

// --- on the device (the soft-RoCE VM) -----------------------------------------------

/// A GID as ibv_devinfo prints it: index, address, type.
type DevinfoGid = (u32, std::net::Ipv6Addr, String);

/// `key: value` fields of `ibv_devinfo -v -d DEV` for port 1, and its GIDs
/// (index → (address, type)).
fn ibv_devinfo(dev: &str) -> (Vec<(String, String)>, Vec<DevinfoGid>) {
    let out = Command::new("ibv_devinfo")
        .args(["-v", "-d", dev, "-i", "1"])
        .output()
        .expect("run ibv_devinfo (ibverbs-utils)");
    assert!(out.status.success(), "ibv_devinfo: {}", text(&out.stderr));
    let mut fields = Vec::new();
    let mut gids = Vec::new();
    for line in text(&out.stdout).lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("GID[") {
            // GID[  1]:		::ffff:169.254.77.1, RoCE v2
            let (index, rest) = rest.split_once("]:").unwrap();
            let rest = rest.trim();
            let (addr, kind) = rest.split_once(", ").unwrap_or((rest, ""));
            gids.push((
                index.trim().parse().unwrap(),
                addr.trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("GID {addr:?}: {e}")),
                kind.trim().to_owned(),
            ));
        } else if let Some((k, v)) = line.split_once(':') {
            fields.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    (fields, gids)
}

fn field<'a>(fields: &'a [(String, String)], key: &str) -> &'a str {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("ibv_devinfo printed no {key}"))
}

fn ports_json(dev: &str) -> serde_json::Value {
    let out = rdmaperf(&["ports", "-d", dev, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    json(&out)
}

#[test]
#[ignore = "needs an RDMA device (RDMAPERF_TEST_DEVICE)"]
fn ports_agrees_with_ibv_devinfo_and_rdma_link() {
    let dev = test_device();
    let doc = ports_json(&dev);
    let port = &doc["devices"][0]["ports"][0];
    assert_eq!(doc["devices"][0]["name"], dev.as_str());
    let (fields, gids) = ibv_devinfo(&dev);
    // "PORT_ACTIVE (4)", "4096 (5)", "1024 (3)", "LINK_UP (5)".
    let number_in_parens = |v: &str| {
        v.rsplit_once('(')
            .and_then(|(_, n)| n.trim_end_matches(')').parse::<u32>().ok())
            .unwrap_or_else(|| panic!("{v:?}"))
    };
    let first_number = |v: &str| v.split_whitespace().next().unwrap().parse::<u64>().unwrap();
    assert_eq!(
        port["state"].as_str().unwrap().split(':').next().unwrap(),
        number_in_parens(field(&fields, "state")).to_string()
    );
    assert_eq!(
        port["phys_state"]
            .as_str()
            .unwrap()
            .split(':')
            .next()
            .unwrap(),
        number_in_parens(field(&fields, "phys_state")).to_string()
    );
    assert_eq!(
        port["active_mtu"],
        first_number(field(&fields, "active_mtu"))
    );
    assert_eq!(port["max_mtu"], first_number(field(&fields, "max_mtu")));
    assert_eq!(port["link_layer"], field(&fields, "link_layer"));
    let ours: Vec<DevinfoGid> = port["gids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["index"].as_u64().unwrap() as u32,
                g["gid"].as_str().unwrap().parse().unwrap(),
                g["kind"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(!ours.is_empty(), "no GIDs: {doc:#}");
    for (index, addr, kind) in &gids {
        let mine = ours.iter().find(|(i, _, _)| i == index);
        let (_, my_addr, my_kind) =
            mine.unwrap_or_else(|| panic!("ibv_devinfo has GID {index}, we do not"));
        assert_eq!(my_addr, addr, "GID {index}");
        // ibv_devinfo: "RoCE v2" / "RoCE v1" / "IB"; sysfs: "RoCE v2" / "IB/RoCE v1".
        assert!(
            my_kind.ends_with(kind.as_str()) || kind.is_empty(),
            "GID {index}: {my_kind:?} vs {kind:?}"
        );
    }
    assert_eq!(
        ours.len(),
        gids.len(),
        "GID count: ours {ours:?}, ibv_devinfo {gids:?}"
    );
    assert_eq!(doc["devices"][0]["node_guid"], field(&fields, "node_guid"));

    // ibv_devices: "    rxe0            	002413fffec5518f"
    let out = Command::new("ibv_devices")
        .output()
        .expect("run ibv_devices (ibverbs-utils)");
    let listed = text(&out.stdout);
    let guid = listed
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(dev.as_str())).then(|| w.next().unwrap_or_default().to_owned())
        })
        .unwrap_or_else(|| panic!("ibv_devices does not list {dev}:\n{listed}"));
    assert_eq!(
        doc["devices"][0]["node_guid"]
            .as_str()
            .unwrap()
            .replace(':', ""),
        guid
    );

    // rdma link: "link rxe0/1 state ACTIVE physical_state LINK_UP netdev veth0"
    let out = Command::new("rdma")
        .args(["link", "show", &format!("{dev}/1")])
        .output()
        .expect("run rdma (iproute2)");
    let link = text(&out.stdout);
    let words: Vec<&str> = link.split_whitespace().collect();
    let after = |k: &str| words.iter().position(|w| *w == k).map(|i| words[i + 1]);
    assert_eq!(
        after("state"),
        port["state"].as_str().unwrap().split(": ").nth(1),
        "{link}"
    );
    assert_eq!(
        after("physical_state").map(|s| s.replace('_', "").to_ascii_lowercase()),
        port["phys_state"]
            .as_str()
            .unwrap()
            .split(": ")
            .nth(1)
            .map(str::to_ascii_lowercase),
        "{link}"
    );
    assert_eq!(after("netdev"), port["netdev"].as_str(), "{link}");
}

#[test]
#[ignore = "needs an RDMA device (RDMAPERF_TEST_DEVICE)"]
fn doctor_on_the_issue_block_names_each_wrong_setting_for_this_machine() {
    let dev = test_device();
    let dir = TempDir::new("docvm");
    let env = dir.path("issue.env");
    std::fs::write(&env, ISSUE_BLOCK).unwrap();
    let out = rdmaperf(&[
        "doctor",
        "nccl",
        "--env-file",
        env.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let doc = json(&out);
    let f = findings(&doc);
    assert!(has(&f, "error", "NCCL_IB_HCA"), "{doc:#}");
    assert!(has(&f, "error", "NCCL_IB_GID_INDEX"), "{doc:#}");
    assert!(has(&f, "error", "NCCL_SOCKET_IFNAME"), "{doc:#}");
    let about = |var: &str| {
        f.iter()
            .filter(|x| x["variable"] == var)
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        about("NCCL_IB_HCA").contains(&dev),
        "the fix names {dev}: {}",
        about("NCCL_IB_HCA")
    );
    assert!(
        about("NCCL_IB_TC").contains("DSCP 10"),
        "{}",
        about("NCCL_IB_TC")
    );
    // The same in text: one line per finding on stdout.
    let out = rdmaperf(&["doctor", "nccl", "--env-file", env.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = text(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("error") && l.contains("NCCL_IB_HCA=mlx5")),
        "{stdout}"
    );
}

#[test]
#[ignore = "needs an RDMA device (RDMAPERF_TEST_DEVICE)"]
fn doctor_on_a_block_right_for_this_machine_finds_no_error() {
    let dev = test_device();
    let doc = ports_json(&dev);
    let port = &doc["devices"][0]["ports"][0];
    let netdev = port["netdev"]
        .as_str()
        .expect("the RoCE port's netdev")
        .to_owned();
    // The IPv4 RoCE v2 GID NCCL wants, or (the single-VM harness gives
    // veth0 no IPv4 address) the link-local RoCE v2 one, a warning only.
    let gids = port["gids"].as_array().unwrap();
    let gid = gids
        .iter()
        .find(|g| g["kind"] == "RoCE v2" && g["ipv4"].is_string())
        .or_else(|| gids.iter().find(|g| g["kind"] == "RoCE v2"))
        .expect("a RoCE v2 GID")["index"]
        .as_u64()
        .unwrap();
    let block = format!(
        "export NCCL_IB_HCA={dev}\nexport NCCL_SOCKET_IFNAME={netdev}\nexport NCCL_IB_GID_INDEX={gid}\n\
         export NCCL_IB_TIMEOUT=20\nexport NCCL_IB_QPS_PER_CONNECTION=4\nexport NCCL_IB_TC=104\n"
    );
    let dir = TempDir::new("docok");
    let env = dir.path("ok.env");
    std::fs::write(&env, block).unwrap();
    // From the environment too, as a job would run it.
    let gid = gid.to_string();
    let from_env = [
        ("NCCL_IB_HCA", dev.as_str()),
        ("NCCL_SOCKET_IFNAME", netdev.as_str()),
        ("NCCL_IB_GID_INDEX", gid.as_str()),
    ];
    let env_file = env.to_str().unwrap();
    for (args, vars) in [
        (
            &["doctor", "nccl", "--env-file", env_file, "--json"][..],
            &[][..],
        ),
        (&["doctor", "nccl", "--json"][..], &from_env[..]),
    ] {
        let out = Reaper::spawn_env(RDMAPERF, args, vars)
            .wait_bounded(Duration::from_secs(60), "rdmaperf doctor nccl");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}\n{}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        let doc = json(&out);
        assert!(
            !findings(&doc).iter().any(|f| f["severity"] == "error"),
            "{doc:#}"
        );
    }
}

/// Retries [`http_get`] until the server answers (at most `limit`).
fn http_get_when_up(port: u16, path: &str, limit: Duration) -> (u16, String) {
    let start = Instant::now();
    loop {
        match http_get(port, path, Duration::from_secs(60)) {
            Ok(r) => return r,
            Err(e) if start.elapsed() > limit => {
                panic!("nothing answered on {port} within {limit:?}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// An exporter listening on 127.0.0.1:`port` with `extra` flags on a host
/// without RDMA, whatever this host has: libibverbs reads sysfs under
/// `SYSFS_PATH`, here an empty directory (returned, with its path).
fn exporter_without_rdma(tag: &str, port: u16, extra: &[&str]) -> (Reaper, TempDir, String) {
    let no_rdma = TempDir::new(tag);
    let path = no_rdma.root().to_str().unwrap().to_owned();
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec!["exporter", "--listen", &listen];
    args.extend_from_slice(extra);
    let exporter = Reaper::spawn_env(RDMAPERF, &args, &[("SYSFS_PATH", &path)]);
    (exporter, no_rdma, path)
}

/// The exporter's answer to `/probe?QUERY` on `port`: a 200 whose
/// `rdmaperf_probe_success` is `want`; its body.
fn probe_answer(port: u16, query: &str, want: f64, limit: Duration) -> String {
    let (status, body) = http_get(port, &format!("/probe?{query}"), limit).unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        sample(&body, "rdmaperf_probe_success", &[]),
        Some(want),
        "{body}"
    );
    body
}

#[test]
fn exporter_refuses_probe_urls_beyond_its_limits_and_keeps_serving() {
    let tree = fixture_str("sysfs/complete");
    let port = free_port();
    let (_exporter, _dir, no_rdma) = exporter_without_rdma(
        "nordma",
        port,
        &[
            "--sysfs-root",
            &tree,
            "--max-size",
            "65536",
            "--max-duration",
            "5",
        ],
    );
    let limit = Duration::from_secs(20);
    let (status, body) = http_get_when_up(port, "/metrics", limit);
    assert_eq!(status, 200);
    assert_promtool_clean(&body, "the exporter's /metrics");
    // A probe whose test finds no device: success 0, the test's own
    // message in the comment, and promtool-clean.
    let probe = probe_answer(port, "target=127.0.0.1:1&duration=1", 0.0, limit);
    let comment = format!(
        "# probe failed: write_bw: error: no RDMA devices in \
         {no_rdma}/class/infiniband (is the driver loaded? for soft-RoCE: rdma link add)\n"
    );
    assert!(probe.starts_with(&comment), "{probe}");
    assert_promtool_clean(&probe, "the exporter's /probe (failed)");
    assert_eq!(
        sample(
            &body,
            "node_infiniband_state_id",
            &[("device", "mlx5_0"), ("port", "1")]
        ),
        Some(4.0),
        "{body}"
    );
    for (path, named) in [
        ("/probe", "target"),
        ("/probe?target=127.0.0.1:1&size=65537", "size"),
        ("/probe?target=127.0.0.1:1&duration=6", "duration"),
        ("/probe?target=127.0.0.1:1&duration=0", "duration"),
        ("/probe?target=127.0.0.1:1&test=rm", "test"),
        ("/probe?target=127.0.0.1:99999", "port"),
        ("/probe?target=-x", "target"),
    ] {
        let (status, body) = http_get(port, path, limit).unwrap();
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains(named), "{path}: {body}");
    }
    let (status, _) = http_get(port, "/nothing", limit).unwrap();
    assert_eq!(status, 404);
    let (status, body) = http_get(port, "/metrics", limit).unwrap();
    assert_eq!(status, 200, "{body}");
}

/// Prometheus' instant query `q`: the result vector.
fn prom_query(port: u16, q: &str) -> Vec<serde_json::Value> {
    let mut enc = String::new();
    for b in q.bytes() {
        if b.is_ascii_alphanumeric() || b"_-.".contains(&b) {
            enc.push(b as char);
        } else {
            enc.push_str(&format!("%{b:02X}"));
        }
    }
    match http_get(
        port,
        &format!("/api/v1/query?query={enc}"),
        Duration::from_secs(20),
    ) {
        Ok((200, body)) => {
            let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            doc["data"]["result"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

fn value_of(result: &serde_json::Value) -> f64 {
    result["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

#[test]
#[ignore = "needs an RDMA device (RDMAPERF_TEST_DEVICE) and Debian's prometheus"]
fn a_real_prometheus_scrapes_the_ports_and_a_probe_of_a_persistent_server() {
    let prometheus = Path::new("/usr/bin/prometheus");
    assert!(
        prometheus.exists(),
        "no /usr/bin/prometheus: run scripts/setup (installs Debian's prometheus)"
    );
    let dev = test_device();
    let (server_port, exporter_port, prom_port) = (free_port(), free_port(), free_port());
    // --accept-timeout, which peers::server adds, does not bound a
    // --persistent server.
    let _server = peers::server(
        env!("CARGO_BIN_EXE_write_bw"),
        &dev,
        server_port,
        &["--persistent"],
    );
    let listen = format!("127.0.0.1:{exporter_port}");
    let exporter = Reaper::spawn(
        RDMAPERF,
        &[
            "exporter",
            "--listen",
            &listen,
            "-d",
            &dev,
            "--probe-timeout",
            "25",
            "--probe-arg=-u",
            "--probe-arg=18",
        ],
    );
    let (status, metrics) = http_get_when_up(exporter_port, "/metrics", Duration::from_secs(30));
    assert_eq!(status, 200, "{metrics}");
    assert_promtool_clean(&metrics, "the exporter's /metrics");
    assert!(
        sample(
            &metrics,
            "node_infiniband_state_id",
            &[("device", &dev), ("port", "1")]
        )
        .is_some(),
        "{metrics}"
    );

    // A probe of `target` with write_bw for 1 s: 200, its
    // rdmaperf_probe_success `want`, promtool-clean.
    let probe = |target: u16, want: f64, what: &str| {
        let body = probe_answer(
            exporter_port,
            &format!("target=127.0.0.1:{target}&test=write_bw&duration=1"),
            want,
            Duration::from_secs(40),
        );
        assert_promtool_clean(&body, what);
    };
    // A dead target (nothing listens): success 0 at once — a refusal is
    // not retried for --timeout, as a client started before its server
    // is — well inside Prometheus' default 10 s scrape timeout (it took
    // 10.9 s when the probe spawned a client that retried); the exporter
    // lives on.
    let t0 = Instant::now();
    probe(free_port(), 0.0, "a failed probe");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "dead-target probe took {:?}",
        t0.elapsed()
    );
    // A target that takes the connection and never answers: the probe is
    // bounded by the scrape's timeout less 0.5 s, so Prometheus records
    // the failure instead of dropping the scrape.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let t0 = Instant::now();
    let (status, body) = http_get_with(
        exporter_port,
        &format!("/probe?target=127.0.0.1:{silent_port}&test=write_bw&duration=1"),
        &["X-Prometheus-Scrape-Timeout-Seconds: 6"],
        Duration::from_secs(40),
    )
    .unwrap();
    let took = t0.elapsed();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        sample(&body, "rdmaperf_probe_success", &[]),
        Some(0.0),
        "{body}"
    );
    // The bound is 5.5 s from the request; a VM emulated on a slow host
    // wakes the exporter late (6.2 s in CI on stop 28, 0.7 s past its
    // deadline), so the test grants such a wake-up 0.5 s beyond the
    // scrape's 6 s: past that the answer is the exporter's fault.
    assert!(
        took < Duration::from_millis(6500),
        "a 6 s scrape's probe took {took:?}: {body}"
    );
    assert!(
        body.starts_with("# probe failed: write_bw"),
        "the reason comes first: {body}"
    );
    assert_promtool_clean(&body, "a probe cut by the scrape timeout");
    drop(silent);
    // A probe of the live server: its test's results (bandwidth) too.
    probe(server_port, 1.0, "a probe of a live server");

    let dir = TempDir::new("prometheus");
    let config = dir.path("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\n\
             scrape_configs:\n\
             \x20 - job_name: rdma\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n\
             \x20 - job_name: rdma_probe\n    metrics_path: /probe\n    scrape_interval: 30s\n    scrape_timeout: 30s\n\
             \x20   params:\n      test: [write_bw]\n      size: ['65536']\n      duration: ['1']\n\
             \x20   static_configs:\n      - targets: ['127.0.0.1:{server_port}']\n\
             \x20   relabel_configs:\n\
             \x20     - source_labels: [__address__]\n        target_label: __param_target\n\
             \x20     - source_labels: [__param_target]\n        target_label: instance\n\
             \x20     - target_label: __address__\n        replacement: 127.0.0.1:{exporter_port}\n"
        ),
    )
    .unwrap();
    let listen = format!("--web.listen-address=127.0.0.1:{prom_port}");
    let config_arg = format!("--config.file={}", config.display());
    let storage = format!("--storage.tsdb.path={}", dir.path("data").display());
    let prom = Reaper::spawn(
        prometheus.to_str().unwrap(),
        &[&config_arg, &storage, &listen],
    );

    let deadline = Instant::now() + Duration::from_secs(240);
    let (mut state, mut success, mut bandwidth) = (Vec::new(), Vec::new(), Vec::new());
    while Instant::now() < deadline {
        state = prom_query(
            prom_port,
            &format!("node_infiniband_state_id{{device=\"{dev}\",port=\"1\"}}"),
        );
        success = prom_query(prom_port, "rdmaperf_probe_success{job=\"rdma_probe\"}");
        bandwidth = prom_query(
            prom_port,
            "rdmaperf_bandwidth_bytes_per_second{job=\"rdma_probe\"}",
        );
        if !state.is_empty() && success.iter().any(|r| value_of(r) == 1.0) && !bandwidth.is_empty()
        {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    prom.signal("TERM");
    let prom_out = prom.wait_bounded(Duration::from_secs(30), "prometheus");
    drop(exporter);
    let why = format!(
        "state {state:?}\nprobe success {success:?}\nbandwidth {bandwidth:?}\nprometheus stderr tail:\n{}",
        text(&prom_out.stderr)
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(state.first().map(value_of), Some(4.0), "{why}");
    assert!(success.iter().any(|r| value_of(r) == 1.0), "{why}");
    assert!(bandwidth.iter().any(|r| value_of(r) > 0.0), "{why}");
}

/// Every metric the Grafana dashboard in docs/ queries is one rdmaperf
/// writes: the port metrics as `ports --prom` writes them for the complete
/// fixture tree, the probe's own from a probe answer, the results and
/// verdicts as engine::fabric::prom names them, the cluster report's as
/// engine::cluster::report does.
#[test]
fn the_grafana_dashboard_queries_only_metrics_rdmaperf_writes() {
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../docs/grafana/rdmaperf-dashboard.json"))
            .expect("docs/grafana/rdmaperf-dashboard.json is JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    assert!(!exprs.is_empty());
    let dir = TempDir::new("dash");
    let prom = dir.path("ports.prom");
    let out = rdmaperf(&[
        "ports",
        "--sysfs-root",
        &fixture_str("sysfs/complete"),
        "--check",
        "--prom",
        prom.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let ports = std::fs::read_to_string(&prom).unwrap();
    let engine_names = concat!(
        include_str!("../crates/engine/src/fabric/prom/ports.rs"),
        include_str!("../crates/engine/src/fabric/prom/results.rs"),
        include_str!("../crates/engine/src/fabric/prom/text.rs"),
        include_str!("../crates/engine/src/cluster/report.rs")
    );
    let exporter_names = concat!(
        include_str!("../src/fabric/exporter/mod.rs"),
        include_str!("../src/fabric/exporter/probe.rs")
    );
    for expr in &exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !(word.starts_with("node_infiniband_") || word.starts_with("rdmaperf_")) {
                continue;
            }
            let written = ports
                .lines()
                .any(|l| l.starts_with(&format!("{word}{{")) || l.starts_with(&format!("{word} ")))
                || engine_names.contains(&format!("\"{word}\""))
                || exporter_names.contains(&format!("\"{word}\""));
            assert!(
                written,
                "the dashboard queries {word}, which rdmaperf does not write ({expr})"
            );
        }
    }
}

/// The test binaries' `--prom FILE`: a latency run's percentiles arrive as
/// a Prometheus summary in seconds, equal to the same run's JSON figures;
/// the verdict and this side's port are there too.
#[test]
#[ignore = "needs an RDMA device (RDMAPERF_TEST_DEVICE)"]
fn a_latency_test_writes_its_percentiles_as_a_prometheus_summary() {
    let dev = test_device();
    let dir = TempDir::new("latprom");
    let prom = dir.path("write_lat.prom");
    let json = dir.path("write_lat.jsonl");
    let (prom_s, json_s) = (prom.to_str().unwrap(), json.to_str().unwrap());
    let (s, c) = support::peers::pair(
        env!("CARGO_BIN_EXE_write_lat"),
        &[
            "-n",
            "400",
            "--prom",
            prom_s,
            "--json",
            json_s,
            "--max-latency",
            "1000000",
        ],
        &[],
    );
    support::assert_ok(&c, "client");
    support::assert_ok(&s, "server");
    let jsonl = std::fs::read_to_string(&json).unwrap();
    let first: serde_json::Value = serde_json::from_str(jsonl.lines().next().unwrap()).unwrap();
    let r = &first["result"];
    let text = std::fs::read_to_string(&prom).unwrap();
    assert_promtool_clean(&text, "write_lat --prom");
    for (q, key) in [
        ("0.5", "p50_us"),
        ("0.9", "p90_us"),
        ("0.99", "p99_us"),
        ("0.999", "p99_9_us"),
    ] {
        let got = sample(
            &text,
            "rdmaperf_latency_seconds",
            &[("quantile", q), ("size_bytes", "2"), ("test", "write_lat")],
        )
        .unwrap_or_else(|| panic!("no quantile {q} in:\n{text}"));
        let want = r[key].as_f64().unwrap() / 1e6;
        assert!(
            (got - want).abs() <= want * 1e-9,
            "quantile {q}: {got} s, JSON {key} {want} s"
        );
    }
    assert_eq!(
        sample(
            &text,
            "rdmaperf_latency_seconds_count",
            &[("size_bytes", "2")]
        ),
        r["iterations"].as_f64(),
        "{text}"
    );
    assert_eq!(
        sample(&text, "rdmaperf_verdict_pass", &[("check", "latency")]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "node_infiniband_state_id",
            &[("device", &dev), ("port", "1")]
        ),
        Some(4.0),
        "{text}"
    );
    // Written atomically: no temporary file is left beside it.
    let leftovers: Vec<_> = std::fs::read_dir(dir.root())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A `--probe-arg` that only some tests take (`-I 64`: inline belongs to
/// the write and send tests; read_bw, read_lat and atomic_bw refuse it)
/// does not stop the exporter: it serves, says on stderr which tests refuse
/// its probe arguments, and a probe of one of those fails with that test's
/// own message. Arguments that every test refuses are exit 2 before
/// anything listens.
#[test]
fn exporter_serves_with_probe_args_some_tests_refuse_and_refuses_ones_all_refuse() {
    let port = free_port();
    let (exporter, _dir, _) = exporter_without_rdma(
        "nordma-probe-args",
        port,
        &["--probe-arg=-I", "--probe-arg=64"],
    );
    let limit = Duration::from_secs(20);
    let (status, _) = http_get_when_up(port, "/metrics", limit);
    assert_eq!(status, 200);
    let probe = probe_answer(port, "target=127.0.0.1:1&test=read_bw", 0.0, limit);
    assert!(
        probe.starts_with(
            "# probe failed: read_bw: error: -I/--inline-size: not an option of read_bw: \
             it belongs to the write tests\n"
        ),
        "{probe}"
    );
    exporter.signal("TERM");
    let out = exporter.wait_bounded(Duration::from_secs(10), "exporter");
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "rdmaperf exporter: warning: probes of read_bw, read_lat, atomic_bw will fail: \
             their tests refuse the --probe-args (read_bw: -I/--inline-size: not an option \
             of read_bw: it belongs to the write tests)"
        ),
        "{err}"
    );

    let out = Command::new(RDMAPERF)
        .args([
            "exporter",
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--probe-arg=--no-such-flag",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("--probe-arg: every test refuses them (write_bw: "),
        "{err}"
    );
}

// --- health on fixture trees --------------------------------------------------

/// `rdmaperf health` on the fixture copy `tree` with the state in `state`.
fn health(tree: &Path, state: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "health",
        "--sysfs-root",
        tree.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    rdmaperf(&args)
}

/// The lines of a text report that start with `prefix`.
fn lines_with<'a>(stdout: &'a str, prefix: &str) -> Vec<&'a str> {
    stdout.lines().filter(|l| l.starts_with(prefix)).collect()
}

fn write_counter(file: &Path, value: u64) {
    std::fs::write(file, format!("{value}\n")).unwrap();
}

/// A copy of the eight-rail fixture and a state directory after one
/// passing health run, and the `counters/` directory of `device`'s port 1.
fn healthy_eight_rails(tag: &str, device: &str) -> (TempDir, TempDir, std::path::PathBuf) {
    let tree = TempDir::copy_of(tag, &fixture("sysfs/eight-rails"));
    let state = TempDir::new(&format!("{tag}-state"));
    let out = health(tree.root(), state.root(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let counters = tree
        .root()
        .join(format!("class/infiniband/{device}/ports/1/counters"));
    (tree, state, counters)
}

#[test]
fn health_passes_eight_healthy_rails_and_fails_a_port_taken_down_with_its_nhc_reason() {
    let tree = TempDir::copy_of("health-down", &fixture("sysfs/eight-rails"));
    let parent = TempDir::new("health-down-state");
    let state = TempDir(parent.root().join("state"));
    let out = health(tree.root(), state.root(), &["--expect-rails", "8"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("health: PASS on "), "{stdout}");
    assert!(
        stdout.contains("PASS rails: 8 rails present: mlx5_0/1, mlx5_1/1,"),
        "{stdout}"
    );
    assert_eq!(lines_with(&stdout, "PASS port ").len(), 8, "{stdout}");
    // The state directory was made owner-only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(state.root())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");

    // mlx5_4 goes down, as `ibportstate disable` leaves it.
    let port = tree.root().join("class/infiniband/mlx5_4/ports/1");
    std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
    std::fs::write(port.join("phys_state"), "3: Disabled\n").unwrap();
    let out = health(tree.root(), state.root(), &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert_eq!(
        lines_with(&stdout, "FAIL "),
        ["FAIL port mlx5_4/1: state DOWN, not ACTIVE; physical state Disabled, not LinkUp"],
        "{stdout}"
    );
    // The scheduler's line: one line, the prefix NHC-style wrappers test.
    let out = health(tree.root(), state.root(), &["--format", "nhc"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        text(&out.stdout),
        "rdmaperf: port: mlx5_4/1 state DOWN, not ACTIVE; physical state Disabled, not LinkUp\n"
    );
    // node-problem-detector: exit 1, at most 80 characters.
    let out = health(tree.root(), state.root(), &["--format", "npd"]);
    assert_eq!(out.status.code(), Some(1));
    let message = text(&out.stdout);
    assert!(
        message.starts_with("rdmaperf: port: mlx5_4/1 state DOWN"),
        "{message}"
    );
    assert!(message.trim_end().chars().count() <= 80, "{message}");
    // The full record.
    let out = health(tree.root(), state.root(), &["--json"]);
    let doc = json(&out);
    assert_eq!(doc["kind"], "health");
    assert_eq!(doc["verdict"], "FAIL");
    let failed: Vec<&serde_json::Value> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "FAIL")
        .collect();
    assert_eq!(failed.len(), 1, "{doc:#}");
    assert_eq!(failed[0]["check"], "port");
    assert_eq!(failed[0]["subject"], "mlx5_4/1");
}

#[test]
fn health_fails_a_rate_trained_down_and_a_missing_rail() {
    let state = TempDir::new("health-rate-state");
    // complete/: mlx5_1 at 200 Gb/s (2X NDR) beside mlx5_0 at 400.
    let tree = fixture("sysfs/complete");
    let out = health(&tree, state.root(), &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert_eq!(
        lines_with(&stdout, "FAIL "),
        [
            "FAIL rate mlx5_1/1: rate 200 Gb/sec (2X NDR) below 400 Gb/s (the fastest port of its \
          kind here): trained down"
        ],
        "{stdout}"
    );
    // A rail named but not there is a finding, not bad input.
    let tree = fixture("sysfs/eight-rails");
    let out = health(&tree, state.root(), &["--rails", "mlx5_0,mlx5_1,mlx5_9"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("FAIL rails: missing: mlx5_9/1"), "{stdout}");
    let out = health(&tree, state.root(), &["--expect-rails", "9"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stdout).contains("FAIL rails: expected 9 rails, found 8"));
}

#[test]
fn health_fails_symbol_errors_over_120_and_warns_on_other_rising_counters() {
    let (tree, state, counters) = healthy_eight_rails("health-sym", "mlx5_2");
    // A bad cable: 200 symbol errors and a receive error since the last run.
    write_counter(&counters.join("symbol_error"), 200);
    write_counter(&counters.join("port_rcv_errors"), 1);
    let out = health(tree.root(), state.root(), &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    let fail = lines_with(&stdout, "FAIL ");
    assert_eq!(fail.len(), 1, "{stdout}");
    assert!(
        fail[0].starts_with("FAIL symbol_error mlx5_2/1: 200 in the last ")
            && fail[0].ends_with("(fail at 120 per hour)"),
        "{stdout}"
    );
    assert_eq!(
        lines_with(&stdout, "WARN "),
        ["WARN counters mlx5_2/1: rose since the last run: counters/port_rcv_errors 0 -> 1"],
        "{stdout}"
    );
    // A counter the site knows to be noise is not warned about.
    write_counter(&counters.join("port_rcv_errors"), 2);
    let out = health(
        tree.root(),
        state.root(),
        &["--ignore-counter", "port_rcv_errors"],
    );
    let stdout = text(&out.stdout);
    assert!(lines_with(&stdout, "WARN ").is_empty(), "{stdout}");
    assert!(
        stdout.contains("PASS counters mlx5_2/1: no error counter rose since the last run"),
        "{stdout}"
    );
    // Under the threshold: a count, not a failure.
    let (tree2, state2, c2) = healthy_eight_rails("health-sym2", "mlx5_2");
    write_counter(&c2.join("symbol_error"), 3);
    let out = health(tree2.root(), state2.root(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("PASS symbol_error mlx5_2/1: 3 in the last "));
}

#[test]
fn health_counts_link_flaps_in_the_window_one_warns_five_fail() {
    let (tree, state, counters) = healthy_eight_rails("health-flap", "mlx5_3");
    let downed = counters.join("link_downed");
    write_counter(&downed, 1);
    let out = health(tree.root(), state.root(), &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        lines_with(&stdout, "WARN "),
        [
            "WARN flap mlx5_3/1: 1 link flap in the last 24h (warn at 2); 1 since the last run \
          (link_downed +1)"
        ],
        "{stdout}"
    );
    // Four more, over two runs: the window holds five.
    write_counter(&downed, 3);
    let out = health(tree.root(), state.root(), &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout)
            .contains("WARN flap mlx5_3/1: 3 link flaps in the last 24h (warn at 2, fail at 5)")
    );
    write_counter(&downed, 5);
    let out = health(tree.root(), state.root(), &["--format", "nhc"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        text(&out.stdout),
        "rdmaperf: flap: mlx5_3/1 5 link flaps in the last 24h (fail at 5); 2 since the last \
         run (link_downed +2)\n"
    );
    // Nothing new: still five in the window, still FAIL (the window, not
    // the last run, decides).
    let out = health(tree.root(), state.root(), &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stdout).contains("FAIL flap mlx5_3/1: 5 link flaps in the last 24h (fail at 5)")
    );
    // A one-second window has forgotten them by now.
    std::thread::sleep(Duration::from_millis(1_100));
    let out = health(tree.root(), state.root(), &["--flap-window", "1s"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn health_sets_a_damaged_state_file_aside_and_still_judges() {
    let tree = fixture("sysfs/eight-rails");
    let state = TempDir::new("health-bad-state");
    assert_eq!(health(&tree, state.root(), &[]).status.code(), Some(0));
    let file = state.root().join("health-state.json");
    assert!(file.exists());
    std::fs::write(
        &file,
        "{\"format\": \"rdmaperf-health-state\", \"version\": 1, \"no",
    )
    .unwrap();
    let out = health(&tree, state.root(), &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let note = lines_with(&stdout, "note: state file ");
    assert_eq!(note.len(), 1, "{stdout}");
    assert!(
        note[0].contains("damaged") && note[0].contains("set aside as"),
        "{stdout}"
    );
    let aside: Vec<String> = std::fs::read_dir(state.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("health-state.json.bad-"))
        .collect();
    assert_eq!(aside.len(), 1);
    // A fresh, valid file replaced it.
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(doc["format"], "rdmaperf-health-state");
}

#[test]
fn health_bad_flags_exit_2_naming_the_flag() {
    let tree = fixture_str("sysfs/eight-rails");
    for (args, flag) in [
        (&["--budget", "0"][..], "--budget"),
        (&["--flap-warn", "6"][..], "--flap-warn"),
        (&["--flap-window", "1w"][..], "--flap-window"),
        (&["--min-bw", "100"][..], "--min-bw"),
        (&["--active", "--baseline-drop", "2"][..], "--baseline-drop"),
        (&["--rails", "mlx5_0,,"][..], "--rails"),
        (&["--format", "xml"][..], "--format"),
    ] {
        let mut argv = vec!["health", "--sysfs-root", &tree];
        argv.extend_from_slice(args);
        let out = rdmaperf(&argv);
        assert_usage_error(&out, flag, &format!("{args:?}"));
    }
}

#[test]
fn exporter_serves_the_last_health_verdict_flaps_and_error_counts_promtool_clean() {
    let (tree, state, port_dir) = healthy_eight_rails("health-exp", "mlx5_3");
    write_counter(&port_dir.join("link_downed"), 5);
    write_counter(&port_dir.join("symbol_error"), 7);
    assert_eq!(
        health(tree.root(), state.root(), &[]).status.code(),
        Some(3)
    );
    let port = free_port();
    let root = tree.root().to_str().unwrap().to_owned();
    let state_dir = state.root().to_str().unwrap().to_owned();
    let (_exporter, _dir, _) = exporter_without_rdma(
        "health-exp-nordma",
        port,
        &["--sysfs-root", &root, "--health-state-dir", &state_dir],
    );
    let (status, body) = http_get_when_up(port, "/metrics", Duration::from_secs(20));
    assert_eq!(status, 200);
    assert_promtool_clean(&body, "the exporter's /metrics with the health state");
    let value = |name: &str, labels: &[(&str, &str)]| sample(&body, name, labels);
    assert_eq!(value("rdmaperf_health_state_read_success", &[]), Some(1.0));
    assert_eq!(
        value("rdmaperf_health_verdict", &[("verdict", "FAIL")]),
        Some(1.0)
    );
    assert_eq!(
        value("rdmaperf_health_verdict", &[("verdict", "PASS")]),
        Some(0.0)
    );
    assert_eq!(
        value(
            "rdmaperf_health_link_flaps",
            &[("device", "mlx5_3"), ("port", "1")]
        ),
        Some(5.0)
    );
    assert_eq!(
        value(
            "rdmaperf_health_link_flaps",
            &[("device", "mlx5_0"), ("port", "1")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            "rdmaperf_health_errors_last_hour",
            &[
                ("device", "mlx5_3"),
                ("port", "1"),
                ("counter", "symbol_error")
            ]
        ),
        Some(7.0)
    );
    assert_eq!(
        value("rdmaperf_health_flap_window_seconds", &[]),
        Some(86_400.0)
    );
    // The ports' own metrics are still there.
    assert_eq!(value("rdmaperf_sysfs_read_success", &[]), Some(1.0));
}

#[test]
fn health_that_hangs_on_sysfs_says_unknown_within_its_budget_and_exits_5() {
    // A sysfs file nobody writes: reading it blocks for ever (a FIFO), as
    // a wedged driver's attribute can.
    let tree = TempDir::copy_of("health-hang", &fixture("sysfs/eight-rails"));
    let state_file = tree.root().join("class/infiniband/mlx5_5/ports/1/state");
    std::fs::remove_file(&state_file).unwrap();
    let made = Command::new("mkfifo").arg(&state_file).status().unwrap();
    assert!(made.success());
    let state = TempDir::new("health-hang-state");
    let child = Reaper::spawn(
        RDMAPERF,
        &[
            "health",
            "--sysfs-root",
            tree.root().to_str().unwrap(),
            "--state-dir",
            state.root().to_str().unwrap(),
            "--budget",
            "1",
            "--format",
            "nhc",
        ],
    );
    // Bounded here too: a health check that hangs would hang the suite.
    let out = child.wait_bounded(Duration::from_secs(60), "rdmaperf health on a hung sysfs");
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "rdmaperf: unknown: budget: the check did not finish within 3 s (--budget)\n"
    );
}
