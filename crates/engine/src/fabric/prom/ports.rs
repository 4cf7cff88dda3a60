//! The metrics of a host's ports, [`port_metrics`]: every
//! `node_infiniband_*` series that node_exporter 1.5.0 emits for the same
//! sysfs tree, with its name, labels and value, plus what node_exporter
//! lacks under `rdmaperf_port_*` / `rdmaperf_device_*`.
//!
//! node_exporter 1.5.0's reading of sysfs (its infiniband collector and
//! prometheus/procfs 0.8's `sysfs/class_infiniband.go`), which
//! [`port_metrics`] follows:
//! - Per device `node_infiniband_info{device,board_id,firmware_version,
//!   hca_type}` 1 (`hca_type=""` when the file is missing).
//! - Per port `state_id`, `physical_state_id` (the number before the
//!   colon) and `rate_bytes_per_second` (the first word of `rate` in
//!   Gb/s × 125 000 000, truncated to an integer); labels `device`,
//!   `port`.
//! - Per port one counter for each of 22 `counters/` files it knows
//!   (table [`NODE_EXPORTER_COUNTERS`]); `port_xmit_data` and
//!   `port_rcv_data` are 4-byte words and are multiplied by 4. A file
//!   that is absent, unreadable or `N/A (no PMA)` gives no series.
//! - No `hw_counters/` at all: the mlx5 ones (`node_infiniband_
//!   local_ack_timeout_errors_total`, …) came in node_exporter 1.11.
//! - The eight `legacy_*` counters it reads from `counters_ext/` (table
//!   [`NODE_EXPORTER_LEGACY_COUNTERS`]; `*_data_64` × 4). The kernel's
//!   own `core/sysfs.c` names every PMA table `counters` (the 64-bit one
//!   too); `counters_ext/` comes from out-of-tree (MLNX_OFED-era)
//!   drivers.
//! - node_exporter 1.5 emits nothing at all when any device lacks
//!   `board_id`, `fw_ver`, a port's `state`, `phys_state`, `rate` or its
//!   `counters/` directory (rxe has no `counters/`), or when a known
//!   counter holds something other than an integer or `N/A (no PMA)`;
//!   [`port_metrics`] still emits every series it can read.

use crate::fabric::ports::{DeviceState, PortState, split_id_name};
use crate::fabric::prom::text::{Exposition, MetricType};

/// A `counters/` file node_exporter 1.5.0 reports, and how.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeExporterCounter {
    /// The file name in `ports/<n>/counters/`.
    pub file: &'static str,
    /// The metric name (after `node_infiniband_`).
    pub metric: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Factor from the file's unit to the metric's (4 for the data
    /// counters, which count 4-byte words).
    pub scale: f64,
}

const fn counter(
    file: &'static str,
    metric: &'static str,
    help: &'static str,
) -> NodeExporterCounter {
    NodeExporterCounter {
        file,
        metric,
        help,
        scale: 1.0,
    }
}

/// The 22 `counters/` files node_exporter 1.5.0 turns into
/// `node_infiniband_<metric>` counters (procfs 0.8
/// `parseInfiniBandCounters`; node_exporter `collector/
/// infiniband_linux.go`). Other files in `counters/` are ignored by it.
pub const NODE_EXPORTER_COUNTERS: [NodeExporterCounter; 22] = [
    counter(
        "excessive_buffer_overrun_errors",
        "excessive_buffer_overrun_errors_total",
        "Times consecutive flow control update periods each had at least one overrun error (counters/excessive_buffer_overrun_errors).",
    ),
    counter(
        "link_downed",
        "link_downed_total",
        "Times the link failed to recover from an error and went down (counters/link_downed).",
    ),
    counter(
        "link_error_recovery",
        "link_error_recovery_total",
        "Times the link recovered from an error (counters/link_error_recovery).",
    ),
    counter(
        "local_link_integrity_errors",
        "local_link_integrity_errors_total",
        "Times local physical errors exceeded their threshold (counters/local_link_integrity_errors).",
    ),
    counter(
        "multicast_rcv_packets",
        "multicast_packets_received_total",
        "Multicast packets received, errors included (counters/multicast_rcv_packets).",
    ),
    counter(
        "multicast_xmit_packets",
        "multicast_packets_transmitted_total",
        "Multicast packets transmitted, errors included (counters/multicast_xmit_packets).",
    ),
    counter(
        "port_rcv_constraint_errors",
        "port_constraint_errors_received_total",
        "Received packets discarded for a partition or constraint violation (counters/port_rcv_constraint_errors).",
    ),
    NodeExporterCounter {
        file: "port_rcv_data",
        metric: "port_data_received_bytes_total",
        help: "Data octets received on all VLs (counters/port_rcv_data, 4-byte words, times 4).",
        scale: 4.0,
    },
    counter(
        "port_rcv_discards",
        "port_discards_received_total",
        "Inbound packets discarded (counters/port_rcv_discards).",
    ),
    counter(
        "port_rcv_errors",
        "port_errors_received_total",
        "Packets with an error received on the port (counters/port_rcv_errors).",
    ),
    counter(
        "port_rcv_packets",
        "port_packets_received_total",
        "Packets received on all VLs, errors included (counters/port_rcv_packets).",
    ),
    counter(
        "port_rcv_remote_physical_errors",
        "port_receive_remote_physical_errors_total",
        "Packets received marked with the EBP delimiter (counters/port_rcv_remote_physical_errors).",
    ),
    counter(
        "port_rcv_switch_relay_errors",
        "port_receive_switch_relay_errors_total",
        "Packets a switch could not forward (counters/port_rcv_switch_relay_errors).",
    ),
    counter(
        "port_xmit_constraint_errors",
        "port_constraint_errors_transmitted_total",
        "Packets not transmitted for a partition or constraint violation (counters/port_xmit_constraint_errors).",
    ),
    NodeExporterCounter {
        file: "port_xmit_data",
        metric: "port_data_transmitted_bytes_total",
        help: "Data octets transmitted on all VLs (counters/port_xmit_data, 4-byte words, times 4).",
        scale: 4.0,
    },
    counter(
        "port_xmit_discards",
        "port_discards_transmitted_total",
        "Outbound packets discarded because the port was down or congested (counters/port_xmit_discards).",
    ),
    counter(
        "port_xmit_packets",
        "port_packets_transmitted_total",
        "Packets transmitted on all VLs, errors included (counters/port_xmit_packets).",
    ),
    counter(
        "port_xmit_wait",
        "port_transmit_wait_total",
        "Ticks the port had data to send but sent none (counters/port_xmit_wait).",
    ),
    counter(
        "symbol_error",
        "symbol_error_total",
        "Minor link errors on any lane (counters/symbol_error).",
    ),
    counter(
        "unicast_rcv_packets",
        "unicast_packets_received_total",
        "Unicast packets received, errors included (counters/unicast_rcv_packets).",
    ),
    counter(
        "unicast_xmit_packets",
        "unicast_packets_transmitted_total",
        "Unicast packets transmitted, errors included (counters/unicast_xmit_packets).",
    ),
    counter(
        "VL15_dropped",
        "vl15_dropped_total",
        "Incoming VL15 (subnet management) packets dropped for lack of resources (counters/VL15_dropped).",
    ),
];

/// The driver counter that is not a counter: how long (ms) the kernel
/// caches `hw_counters/` values.
const HW_COUNTERS_LIFESPAN: &str = "lifespan";

/// Bytes per second in one Gb/s, as node_exporter converts `rate`.
const BYTES_PER_SECOND_PER_GBPS: f64 = 125_000_000.0;

/// Every metric of the ports of `devices`: the `node_infiniband_*`
/// series node_exporter 1.5.0 emits for the same sysfs (see the module
/// documentation), then rdmaperf's own:
///
/// | family | labels | value |
/// |---|---|---|
/// | `rdmaperf_device_info` | `device, node_type, node_guid, pci_address, numa_node` | 1 |
/// | `rdmaperf_port_info` | `device, port, link_layer, rate, netdev, lid, sm_lid` | 1 |
/// | `rdmaperf_port_active_mtu_bytes` | `device, port` | active MTU, when known |
/// | `rdmaperf_port_max_mtu_bytes` | `device, port` | maximum MTU, when known |
/// | `rdmaperf_port_gid_info` | `device, port, index, gid, type, netdev, ipv4` | 1 per valid GID |
/// | `rdmaperf_port_hw_stat_total` | `device, port, counter` | each `hw_counters/` file but `lifespan` |
/// | `rdmaperf_port_hw_counters_lifespan_seconds` | `device, port` | `hw_counters/lifespan` ÷ 1000 |
///
/// Info labels whose value is unknown are present with `""` (as
/// node_exporter's `hca_type`), so a family's label set never varies.
/// A port without `counters/` (rxe) still gets its state, physical
/// state, rate and info; a value that does not parse is left out.
pub fn port_metrics(devices: &[DeviceState]) -> Exposition {
    let mut e = Exposition::new();
    for dev in devices {
        node_exporter_device(&mut e, dev);
        rdmaperf_device(&mut e, dev);
        for port in &dev.ports {
            node_exporter_port(&mut e, &dev.name, port);
            rdmaperf_port(&mut e, &dev.name, port);
        }
    }
    e
}

fn node_exporter_device(e: &mut Exposition, dev: &DeviceState) {
    e.sample(
        "node_infiniband_info",
        "Non-numeric data of /sys/class/infiniband/<device> (board_id, fw_ver, hca_type); always 1.",
        MetricType::Gauge,
        // node_exporter's labels, in the order its client prints them
        // (sorted), so the lines are the same text.
        &[
            ("board_id", dev.board_id.as_deref().unwrap_or("")),
            ("device", dev.name.as_str()),
            ("firmware_version", dev.fw_ver.as_deref().unwrap_or("")),
            ("hca_type", dev.hca_type.as_deref().unwrap_or("")),
        ],
        1.0,
    );
}

/// The 8 `counters_ext/` files node_exporter 1.5.0 turns into
/// `node_infiniband_legacy_*` counters (procfs 0.8 `parseInfiniBandCounters`,
/// "Parse legacy counters"; node_exporter `collector/infiniband_linux.go`).
pub const NODE_EXPORTER_LEGACY_COUNTERS: [NodeExporterCounter; 8] = [
    counter(
        "port_multicast_rcv_packets",
        "legacy_multicast_packets_received_total",
        "Multicast packets received (counters_ext/port_multicast_rcv_packets).",
    ),
    counter(
        "port_multicast_xmit_packets",
        "legacy_multicast_packets_transmitted_total",
        "Multicast packets transmitted (counters_ext/port_multicast_xmit_packets).",
    ),
    NodeExporterCounter {
        file: "port_rcv_data_64",
        metric: "legacy_data_received_bytes_total",
        help: "Data octets received on all links (counters_ext/port_rcv_data_64, 4-byte words, times 4).",
        scale: 4.0,
    },
    counter(
        "port_rcv_packets_64",
        "legacy_packets_received_total",
        "Data packets received on all links (counters_ext/port_rcv_packets_64).",
    ),
    counter(
        "port_unicast_rcv_packets",
        "legacy_unicast_packets_received_total",
        "Unicast packets received (counters_ext/port_unicast_rcv_packets).",
    ),
    counter(
        "port_unicast_xmit_packets",
        "legacy_unicast_packets_transmitted_total",
        "Unicast packets transmitted (counters_ext/port_unicast_xmit_packets).",
    ),
    NodeExporterCounter {
        file: "port_xmit_data_64",
        metric: "legacy_data_transmitted_bytes_total",
        help: "Data octets transmitted on all links (counters_ext/port_xmit_data_64, 4-byte words, times 4).",
        scale: 4.0,
    },
    counter(
        "port_xmit_packets_64",
        "legacy_packets_transmitted_total",
        "Data packets transmitted on all links (counters_ext/port_xmit_packets_64).",
    ),
];

fn node_exporter_port(e: &mut Exposition, device: &str, port: &PortState) {
    let number = port.port.to_string();
    let labels = [("device", device), ("port", number.as_str())];
    if let Some(id) = port.state_id() {
        e.sample(
            "node_infiniband_state_id",
            "Logical state of the port (ports/<n>/state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER).",
            MetricType::Gauge,
            &labels,
            f64::from(id),
        );
    }
    if let Some(id) = port.phys_state_id() {
        e.sample(
            "node_infiniband_physical_state_id",
            "Physical state of the port (ports/<n>/phys_state: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test).",
            MetricType::Gauge,
            &labels,
            f64::from(id),
        );
    }
    if let Some(rate) = rate_bytes_per_second(port) {
        e.sample(
            "node_infiniband_rate_bytes_per_second",
            "Negotiated data rate of the port (ports/<n>/rate), bytes per second.",
            MetricType::Gauge,
            &labels,
            rate,
        );
    }
    let tables = [
        (&NODE_EXPORTER_COUNTERS[..], &port.counters),
        (&NODE_EXPORTER_LEGACY_COUNTERS[..], &port.counters_ext),
    ];
    for (table, values) in tables {
        for c in table {
            if let Some(&raw) = values.get(c.file) {
                e.sample(
                    &format!("node_infiniband_{}", c.metric),
                    c.help,
                    MetricType::Counter,
                    &labels,
                    raw as f64 * c.scale,
                );
            }
        }
    }
}

/// The `rate` file in bytes/s as node_exporter computes it: Gb/s ×
/// 125 000 000, truncated to an integer (`400 Gb/sec (4X NDR)` →
/// 5e10). node_exporter parses the number as a 32-bit float; every rate
/// the kernel prints (an integer or `x.5`) is exact in both.
fn rate_bytes_per_second(port: &PortState) -> Option<f64> {
    port.rate_gbps()
        .map(|gbps| (gbps * BYTES_PER_SECOND_PER_GBPS).trunc())
}

fn rdmaperf_device(e: &mut Exposition, dev: &DeviceState) {
    let node_type = dev
        .node_type
        .as_deref()
        .map(|raw| split_id_name(raw).map_or(raw, |(_, name)| name))
        .unwrap_or("");
    let numa = dev.numa_node.map(|n| n.to_string()).unwrap_or_default();
    e.sample(
        "rdmaperf_device_info",
        "An RDMA device: node type, node GUID, PCI address and NUMA node (-1: none); always 1.",
        MetricType::Gauge,
        &[
            ("device", dev.name.as_str()),
            ("node_type", node_type),
            ("node_guid", dev.node_guid.as_deref().unwrap_or("")),
            ("pci_address", dev.pci_address.as_deref().unwrap_or("")),
            ("numa_node", numa.as_str()),
        ],
        1.0,
    );
}

fn rdmaperf_port(e: &mut Exposition, device: &str, port: &PortState) {
    let number = port.port.to_string();
    let labels = [("device", device), ("port", number.as_str())];
    e.sample(
        "rdmaperf_port_info",
        "A port: link layer, negotiated rate as the kernel prints it, network interface (RoCE), LID and SM LID; always 1.",
        MetricType::Gauge,
        &[
            ("device", device),
            ("port", number.as_str()),
            ("link_layer", port.link_layer.as_deref().unwrap_or("")),
            ("rate", port.rate.as_deref().unwrap_or("")),
            ("netdev", port.netdev.as_deref().unwrap_or("")),
            ("lid", port.lid.as_deref().unwrap_or("")),
            ("sm_lid", port.sm_lid.as_deref().unwrap_or("")),
        ],
        1.0,
    );
    if let Some(mtu) = port.active_mtu {
        e.sample(
            "rdmaperf_port_active_mtu_bytes",
            "Active MTU of the port, bytes (from the verbs).",
            MetricType::Gauge,
            &labels,
            f64::from(mtu),
        );
    }
    if let Some(mtu) = port.max_mtu {
        e.sample(
            "rdmaperf_port_max_mtu_bytes",
            "Largest MTU the port supports, bytes (from the verbs).",
            MetricType::Gauge,
            &labels,
            f64::from(mtu),
        );
    }
    for g in &port.gids {
        let index = g.index.to_string();
        e.sample(
            "rdmaperf_port_gid_info",
            "A valid GID table entry of the port (gids/<index>, gid_attrs/types, gid_attrs/ndevs); always 1.",
            MetricType::Gauge,
            &[
                ("device", device),
                ("port", number.as_str()),
                ("index", index.as_str()),
                ("gid", g.gid.as_str()),
                ("type", g.kind.as_deref().unwrap_or("")),
                ("netdev", g.netdev.as_deref().unwrap_or("")),
                ("ipv4", g.ipv4.as_deref().unwrap_or("")),
            ],
            1.0,
        );
    }
    for (name, &value) in &port.hw_counters {
        if name == HW_COUNTERS_LIFESPAN {
            e.sample(
                "rdmaperf_port_hw_counters_lifespan_seconds",
                "How long the kernel caches the port's hw_counters values (hw_counters/lifespan), seconds.",
                MetricType::Gauge,
                &labels,
                value as f64 / 1000.0,
            );
        } else {
            e.sample(
                "rdmaperf_port_hw_stat_total",
                "A driver counter of the port (hw_counters/<counter>), raw; names and meanings vary by driver.",
                MetricType::Counter,
                &[("device", device), ("port", number.as_str()), ("counter", name.as_str())],
                value as f64,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::ports::GidEntry;
    use crate::fabric::prom::text::tests::{is_valid_metric_name, lines_of};

    /// mlx5_0 of tests/fixtures/sysfs/complete, as the sysfs reader fills
    /// the model (data counters in 4-byte words, as read).
    fn ndr_device() -> DeviceState {
        let counters = [
            ("VL15_dropped", 0),
            ("excessive_buffer_overrun_errors", 0),
            ("link_downed", 1),
            ("link_error_recovery", 0),
            ("local_link_integrity_errors", 0),
            ("multicast_rcv_packets", 38),
            ("multicast_xmit_packets", 0),
            ("port_rcv_constraint_errors", 0),
            ("port_rcv_data", 3_752_813_472_958_301),
            ("port_rcv_errors", 3),
            ("port_rcv_packets", 1_442_917_315),
            ("port_rcv_remote_physical_errors", 0),
            ("port_rcv_switch_relay_errors", 0),
            ("port_xmit_constraint_errors", 0),
            ("port_xmit_data", 1_398_451_262_304),
            ("port_xmit_discards", 2),
            ("port_xmit_packets", 1_369_877_904),
            ("port_xmit_wait", 52_337_715),
            ("symbol_error", 7),
            ("unicast_rcv_packets", 1_442_917_277),
            ("unicast_xmit_packets", 1_369_877_904),
        ];
        DeviceState {
            name: "mlx5_0".into(),
            node_type: Some("1: CA".into()),
            node_guid: Some("a088:c203:00b4:5e10".into()),
            fw_ver: Some("28.39.1002".into()),
            board_id: Some("MT_0000000838".into()),
            hca_type: Some("MT4129".into()),
            ports: vec![PortState {
                port: 1,
                state: Some("4: ACTIVE".into()),
                phys_state: Some("5: LinkUp".into()),
                rate: Some("400 Gb/sec (4X NDR)".into()),
                link_layer: Some("InfiniBand".into()),
                lid: Some("0x1a".into()),
                sm_lid: Some("0x1".into()),
                counters: counters.iter().map(|&(k, v)| (k.to_owned(), v)).collect(),
                hw_counters: [("lifespan", 10), ("local_ack_timeout_err", 12)]
                    .iter()
                    .map(|&(k, v)| (k.to_owned(), v))
                    .collect(),
                ..PortState::default()
            }],
            ..DeviceState::default()
        }
    }

    #[test]
    fn node_exporter_lines_are_reproduced() {
        let text = port_metrics(&[ndr_device()]).render();
        // Lines copied from node_exporter 1.5.0's /metrics on
        // tests/fixtures/sysfs/complete (mlx5_0).
        for line in [
            "node_infiniband_info{board_id=\"MT_0000000838\",device=\"mlx5_0\",firmware_version=\"28.39.1002\",hca_type=\"MT4129\"} 1",
            "node_infiniband_state_id{device=\"mlx5_0\",port=\"1\"} 4",
            "node_infiniband_physical_state_id{device=\"mlx5_0\",port=\"1\"} 5",
            "node_infiniband_rate_bytes_per_second{device=\"mlx5_0\",port=\"1\"} 5e+10",
            "node_infiniband_port_data_received_bytes_total{device=\"mlx5_0\",port=\"1\"} 1.5011253891833204e+16",
            "node_infiniband_port_data_transmitted_bytes_total{device=\"mlx5_0\",port=\"1\"} 5.593805049216e+12",
            "node_infiniband_port_packets_received_total{device=\"mlx5_0\",port=\"1\"} 1.442917315e+09",
            "node_infiniband_port_transmit_wait_total{device=\"mlx5_0\",port=\"1\"} 5.2337715e+07",
            "node_infiniband_port_discards_transmitted_total{device=\"mlx5_0\",port=\"1\"} 2",
            "node_infiniband_symbol_error_total{device=\"mlx5_0\",port=\"1\"} 7",
            "node_infiniband_vl15_dropped_total{device=\"mlx5_0\",port=\"1\"} 0",
            "# TYPE node_infiniband_link_downed_total counter",
            "# TYPE node_infiniband_state_id gauge",
            "# TYPE node_infiniband_info gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        // node_exporter 1.5 maps no hw_counters; 21 counters/ files, no
        // port_rcv_discards in this port.
        assert_eq!(lines_of(&text, "node_infiniband_").len(), 1 + 3 + 21);
        assert!(!text.contains("node_infiniband_local_ack_timeout"));
        assert!(text.contains(
            "rdmaperf_port_hw_stat_total{device=\"mlx5_0\",port=\"1\",counter=\"local_ack_timeout_err\"} 12\n"
        ));
        assert!(text.contains(
            "rdmaperf_port_hw_counters_lifespan_seconds{device=\"mlx5_0\",port=\"1\"} 0.01\n"
        ));
        assert!(!text.contains("counter=\"lifespan\""));
        assert!(text.contains(
            "rdmaperf_port_info{device=\"mlx5_0\",port=\"1\",link_layer=\"InfiniBand\",rate=\"400 Gb/sec (4X NDR)\",netdev=\"\",lid=\"0x1a\",sm_lid=\"0x1\"} 1\n"
        ));
        assert!(text.contains(
            "rdmaperf_device_info{device=\"mlx5_0\",node_type=\"CA\",node_guid=\"a088:c203:00b4:5e10\",pci_address=\"\",numa_node=\"\"} 1\n"
        ));
        // MTUs only when the verbs gave them.
        assert!(!text.contains("mtu"));
        // Every name is valid as written (nothing needed sanitizing).
        for name in port_metrics(&[ndr_device()]).family_names() {
            assert!(is_valid_metric_name(name), "{name}");
        }
    }

    #[test]
    fn a_port_without_counters_still_reports_its_state() {
        // rxe: no counters/, no board_id, an empty fw_ver; node_exporter
        // 1.5 reports nothing at all for such a host.
        let dev = DeviceState {
            name: "rxe0".into(),
            ports: vec![PortState {
                port: 1,
                state: Some("4: ACTIVE".into()),
                phys_state: Some("5: LinkUp".into()),
                rate: Some("2.5 Gb/sec (1X SDR)".into()),
                link_layer: Some("Ethernet".into()),
                active_mtu: Some(1024),
                max_mtu: Some(4096),
                netdev: Some("eth0".into()),
                gids: vec![GidEntry {
                    index: 1,
                    gid: "0000:0000:0000:0000:0000:ffff:0a00:020f".into(),
                    kind: Some("RoCE v2".into()),
                    netdev: Some("eth0".into()),
                    ipv4: Some("10.0.2.15".into()),
                }],
                hw_counters: [("sent_pkts", 1_048_576), ("rcvd_seq_err", 0)]
                    .iter()
                    .map(|&(k, v)| (k.to_owned(), v))
                    .collect(),
                ..PortState::default()
            }],
            ..DeviceState::default()
        };
        let text = port_metrics(&[dev]).render();
        assert_eq!(
            lines_of(&text, "node_infiniband_"),
            [
                "node_infiniband_info{board_id=\"\",device=\"rxe0\",firmware_version=\"\",hca_type=\"\"} 1",
                "node_infiniband_physical_state_id{device=\"rxe0\",port=\"1\"} 5",
                // procfs: 2.5 × 125 000 000.
                "node_infiniband_rate_bytes_per_second{device=\"rxe0\",port=\"1\"} 3.125e+08",
                "node_infiniband_state_id{device=\"rxe0\",port=\"1\"} 4",
            ]
        );
        assert_eq!(
            lines_of(&text, "rdmaperf_port_hw_stat_total"),
            [
                "rdmaperf_port_hw_stat_total{device=\"rxe0\",port=\"1\",counter=\"rcvd_seq_err\"} 0",
                "rdmaperf_port_hw_stat_total{device=\"rxe0\",port=\"1\",counter=\"sent_pkts\"} 1.048576e+06",
            ]
        );
        assert!(text.contains("rdmaperf_port_active_mtu_bytes{device=\"rxe0\",port=\"1\"} 1024\n"));
        assert!(text.contains("rdmaperf_port_max_mtu_bytes{device=\"rxe0\",port=\"1\"} 4096\n"));
        assert!(text.contains(
            "rdmaperf_port_gid_info{device=\"rxe0\",port=\"1\",index=\"1\",gid=\"0000:0000:0000:0000:0000:ffff:0a00:020f\",type=\"RoCE v2\",netdev=\"eth0\",ipv4=\"10.0.2.15\"} 1\n"
        ));
    }

    #[test]
    fn unparsable_port_files_leave_their_series_out() {
        let dev = DeviceState {
            name: "odd0".into(),
            ports: vec![PortState {
                port: 2,
                state: Some("ACTIVE".into()),
                phys_state: Some("x: LinkUp".into()),
                rate: Some("fast".into()),
                ..PortState::default()
            }],
            ..DeviceState::default()
        };
        let text = port_metrics(&[dev]).render();
        assert!(!text.contains("node_infiniband_state_id"));
        assert!(!text.contains("node_infiniband_physical_state_id"));
        assert!(!text.contains("node_infiniband_rate"));
        assert!(text.contains("rate=\"fast\""));
    }
}
