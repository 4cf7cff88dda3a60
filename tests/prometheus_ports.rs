//! `rdmaperf ports --prom` against node_exporter: on the same sysfs tree,
//! every `node_infiniband_*` series node_exporter 1.5 emits must be in
//! ours with the same labels and value; on a soft-RoCE tree (no
//! `counters/`), where node_exporter's collector fails, ours still
//! reports the port.
//!
//! Every exposition of ours must also pass `promtool check metrics` with
//! no finding.
//!
//! Needs `/usr/bin/prometheus-node-exporter` and `/usr/bin/promtool`
//! (scripts/setup installs both), no RDMA device. node_exporter listens on a free loopback port only.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use support::exposition::{SeriesKey, parse_exposition};
use support::{TempDir, assert_ok, assert_promtool_clean, fixture, free_port, http_get};

const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";

/// A running node_exporter, killed (and reaped) on drop.
struct NodeExporter {
    child: Child,
    addr: SocketAddr,
    /// Its `--web.telemetry-path`, unique to this instance: metrics
    /// there come from this node_exporter and no other (any other path,
    /// another instance's metrics path included, gets its HTML landing
    /// page).
    path: String,
    log: PathBuf,
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl NodeExporter {
    /// Starts node_exporter's infiniband collector alone on `sysfs`,
    /// listening on a free loopback port, and waits until it answers on
    /// its own metrics path. A port taken between choosing and binding
    /// makes it exit, and a node_exporter already on that port answers
    /// there with its landing page, not metrics; then another port is
    /// tried (bounded).
    fn start(sysfs: &Path, dir: &TempDir) -> Self {
        Self::start_on(sysfs, dir, free_port)
    }

    /// [`NodeExporter::start`] with the ports to try from `next_port`.
    fn start_on(sysfs: &Path, dir: &TempDir, mut next_port: impl FnMut() -> u16) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        assert!(
            Path::new(NODE_EXPORTER).exists(),
            "{NODE_EXPORTER} is missing: run scripts/setup (it installs prometheus-node-exporter)"
        );
        let mut failures = Vec::new();
        for attempt in 0..5 {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, next_port()));
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = format!("/metrics-{}-{n}", std::process::id());
            let log = dir.path(&format!("node_exporter-{n}.log"));
            let child = Command::new(NODE_EXPORTER)
                .arg(format!("--path.sysfs={}", sysfs.display()))
                .args(["--collector.disable-defaults", "--collector.infiniband"])
                .arg(format!("--web.listen-address={addr}"))
                .arg(format!("--web.telemetry-path={path}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(&log).unwrap())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {NODE_EXPORTER}: {e}"));
            let mut ne = NodeExporter {
                child,
                addr,
                path,
                log,
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Ok(Some(status)) = ne.child.try_wait() {
                    failures.push(format!(
                        "attempt {attempt} on {addr}: exited {status}: {}",
                        ne.log_text()
                    ));
                    break;
                }
                if let Ok((200, body)) = http_get(addr.port(), &ne.path, Duration::from_secs(2))
                    && body.contains("node_scrape_collector_success")
                {
                    return ne;
                }
                if Instant::now() > deadline {
                    failures.push(format!(
                        "attempt {attempt} on {addr}: no 200 on {} after 10 s: {}",
                        ne.path,
                        ne.log_text()
                    ));
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("node_exporter did not start:\n{}", failures.join("\n"));
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET` of its metrics path over HTTP/1.0: the body.
    fn scrape(&self) -> String {
        let (status, body) = http_get(self.addr.port(), &self.path, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("GET {} from {}: {e}", self.path, self.addr));
        assert_eq!(
            status,
            200,
            "node_exporter answered {status}; log:\n{}",
            self.log_text()
        );
        body
    }
}

/// Runs `rdmaperf ports --sysfs-root <tree> --prom <file>`; the file.
fn our_exposition(tree: &Path, dir: &TempDir) -> String {
    let prom = dir.path("ports.prom");
    let out = Command::new(env!("CARGO_BIN_EXE_rdmaperf"))
        .arg("ports")
        .arg("--sysfs-root")
        .arg(tree)
        .arg("--prom")
        .arg(&prom)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ok(&out, "rdmaperf ports --prom");
    let text =
        fs::read_to_string(&prom).unwrap_or_else(|e| panic!("reading {}: {e}", prom.display()));
    assert_promtool_clean(&text, &format!("ports --prom of {}", tree.display()));
    text
}

fn series(name: &str, labels: &[(&str, &str)]) -> SeriesKey {
    (
        name.to_owned(),
        labels
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

fn collector_success(samples: &BTreeMap<SeriesKey, f64>) -> Option<f64> {
    samples
        .get(&series(
            "node_scrape_collector_success",
            &[("collector", "infiniband")],
        ))
        .copied()
}

fn node_infiniband(samples: &BTreeMap<SeriesKey, f64>) -> BTreeMap<&SeriesKey, f64> {
    samples
        .iter()
        .filter(|((name, _), _)| name.starts_with("node_infiniband_"))
        .map(|(k, &v)| (k, v))
        .collect()
}

fn show(key: &SeriesKey) -> String {
    let labels: Vec<String> = key.1.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{}{{{}}}", key.0, labels.join(","))
}

#[test]
fn every_node_exporter_infiniband_series_is_reproduced() {
    let tree = fixture("sysfs/complete");
    let dir = TempDir::new("prom");
    let theirs_text = NodeExporter::start(&tree, &dir).scrape();
    let theirs = parse_exposition(&theirs_text);
    assert_eq!(
        collector_success(&theirs),
        Some(1.0),
        "node_exporter's infiniband collector failed on {}:\n{theirs_text}",
        tree.display()
    );
    let theirs = node_infiniband(&theirs);
    // 3 info + 3 ports × (3 gauges + 21 counters) + mlx5_0's 8 legacy
    // counters (counters_ext/).
    assert_eq!(theirs.len(), 83, "{theirs:#?}");
    assert_eq!(
        theirs
            .keys()
            .filter(|(name, _)| name.starts_with("node_infiniband_legacy_"))
            .count(),
        8
    );

    let ours_text = our_exposition(&tree, &dir);
    assert!(ours_text.ends_with('\n'), "{ours_text}");
    let ours = parse_exposition(&ours_text);

    let mut problems = Vec::new();
    for (key, &want) in &theirs {
        match ours.get(*key) {
            None => problems.push(format!("missing {} (node_exporter: {want})", show(key))),
            Some(&got) if got != want && !(got.is_nan() && want.is_nan()) => {
                problems.push(format!("{}: ours {got}, node_exporter {want}", show(key)))
            }
            Some(_) => {}
        }
    }
    for (key, v) in node_infiniband(&ours) {
        if !theirs.contains_key(key) {
            problems.push(format!("extra {} {v} (node_exporter has none)", show(key)));
        }
    }
    // What node_exporter lacks, on the RoCE port: its netdev and the
    // IPv4-mapped RoCE v2 GID at index 3, as the fixture has them.
    let roce = [("device", "mlx5_2"), ("port", "1")];
    for (key, want) in [
        (
            series(
                "rdmaperf_port_info",
                &[
                    roce[0],
                    roce[1],
                    ("link_layer", "Ethernet"),
                    ("rate", "200 Gb/sec (4X HDR)"),
                    ("netdev", "ens3f0np0"),
                    ("lid", "0x0"),
                    ("sm_lid", "0x0"),
                ],
            ),
            1.0,
        ),
        (
            series(
                "rdmaperf_port_gid_info",
                &[
                    roce[0],
                    roce[1],
                    ("index", "3"),
                    ("gid", "0000:0000:0000:0000:0000:ffff:c0a8:0a02"),
                    ("type", "RoCE v2"),
                    ("netdev", "ens3f0np0"),
                    ("ipv4", "192.168.10.2"),
                ],
            ),
            1.0,
        ),
        (
            series(
                "rdmaperf_port_hw_stat_total",
                &[roce[0], roce[1], ("counter", "np_cnp_sent")],
            ),
            1204.0,
        ),
    ] {
        if ours.get(&key) != Some(&want) {
            problems.push(format!(
                "{}: ours {:?}, want {want}",
                show(&key),
                ours.get(&key)
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems (node_exporter 1.5.0 is the reference):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn a_port_without_counters_is_reported_where_node_exporter_fails() {
    let tree = fixture("sysfs/rxe");
    let dir = TempDir::new("prom");
    let theirs_text = NodeExporter::start(&tree, &dir).scrape();
    let theirs = parse_exposition(&theirs_text);
    assert_eq!(
        collector_success(&theirs),
        Some(0.0),
        "node_exporter 1.5 was expected to fail on a port without counters/:\n{theirs_text}"
    );
    assert!(node_infiniband(&theirs).is_empty(), "{theirs_text}");

    let ours = parse_exposition(&our_exposition(&tree, &dir));
    let port = [("device", "rxe0"), ("port", "1")];
    let mut problems = Vec::new();
    let mut expect = |key: SeriesKey, want: f64| match ours.get(&key) {
        Some(&got) if got == want => {}
        other => problems.push(format!("{}: ours {other:?}, want {want}", show(&key))),
    };
    // From the fixture's state, phys_state and rate files.
    expect(series("node_infiniband_state_id", &port), 4.0);
    expect(series("node_infiniband_physical_state_id", &port), 5.0);
    expect(
        series("node_infiniband_rate_bytes_per_second", &port),
        1.25e9,
    );
    expect(
        series(
            "node_infiniband_info",
            &[
                ("device", "rxe0"),
                ("board_id", ""),
                ("firmware_version", ""),
                ("hca_type", ""),
            ],
        ),
        1.0,
    );
    // Every driver counter but lifespan, with the file's value.
    let hw = tree.join("class/infiniband/rxe0/ports/1/hw_counters");
    let mut counted = 0;
    for entry in fs::read_dir(&hw).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let value: f64 = fs::read_to_string(entry.path())
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        if name == "lifespan" {
            expect(
                series("rdmaperf_port_hw_counters_lifespan_seconds", &port),
                value / 1000.0,
            );
        } else {
            counted += 1;
            expect(
                series(
                    "rdmaperf_port_hw_stat_total",
                    &[("device", "rxe0"), ("port", "1"), ("counter", &name)],
                ),
                value,
            );
        }
    }
    assert_eq!(counted, 15, "rxe's 15 counters besides lifespan");
    let hw_series = ours
        .keys()
        .filter(|(name, _)| name == "rdmaperf_port_hw_stat_total")
        .count();
    assert_eq!(hw_series, counted);
    // No counters/ means no PMA counter series.
    assert!(
        ours.keys()
            .filter(|(name, _)| name.starts_with("node_infiniband_"))
            .all(|(name, _)| !name.ends_with("_total")),
        "{ours:#?}"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Two node_exporters on the same port (free_port's choice is released
/// before node_exporter binds it; free_port no longer repeats itself in
/// one process, but another process may take the port meanwhile): the
/// one that could not bind must not take the other's listener for its
/// own. CI once scraped the other test's node_exporter as that test
/// killed it ("connection reset by peer").
#[test]
fn a_node_exporter_whose_port_is_taken_is_not_mistaken_for_the_one_listening() {
    let dir = TempDir::new("prom");
    let first = NodeExporter::start(&fixture("sysfs/rxe"), &dir);
    let mut ports = [first.addr.port()].into_iter();
    let second = NodeExporter::start_on(&fixture("sysfs/complete"), &dir, || {
        ports.next().unwrap_or_else(free_port)
    });
    assert_ne!(second.addr, first.addr);
    assert_eq!(
        collector_success(&parse_exposition(&second.scrape())),
        Some(1.0),
        "the second node_exporter serves the complete tree, where its collector succeeds"
    );
}
