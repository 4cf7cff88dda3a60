//! Prometheus text exposition (format 0.0.4) and what rdmaperf says in it.
//!
//! - [`Exposition`]: metric families and their samples, written as the
//!   text format: one `# HELP` and one `# TYPE` line per family, each
//!   family's samples together, families in name order, samples in the
//!   order they were added.
//! - [`port_metrics`]: the ports of a host. Every `node_infiniband_*`
//!   series that node_exporter 1.5.0 emits for the same sysfs tree, with
//!   its name, labels and value, plus what node_exporter lacks under
//!   `rdmaperf_port_*` / `rdmaperf_device_*`.
//! - [`ResultMetrics`]: the results of a test run (`--prom FILE`), fed
//!   with its [`SizeRecord`]s and [`VerdictRecord`]s.
//!
//! Names. Metric and label names used here are constants of this module;
//! a name outside `[a-zA-Z_:][a-zA-Z0-9_:]*` (label names:
//! `[a-zA-Z_][a-zA-Z0-9_]*`) would be a programming error, and rather
//! than fail or panic, [`Exposition`] sanitizes it: every character
//! outside the set becomes `_`, and a name that is empty or starts with a
//! digit gets a leading `_`. Whatever comes from the host (device names,
//! driver counter names, firmware strings) goes into label values, which
//! may hold any text and are escaped.
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

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::fabric::ports::{DeviceState, PortState, split_id_name};
use crate::results::bw::{BwResult, MIB};
use crate::results::lat::LatStats;
use crate::results::record::{Figures, RunContext, SizeRecord};
use crate::results::verdict::VerdictRecord;

/// The `# TYPE` of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// A value that only goes up (reset to 0 on restart); names end in
    /// `_total`.
    Counter,
    /// A value that may go up and down.
    Gauge,
    /// Quantiles (`{quantile="0.5"}` …) plus `_sum` and `_count`.
    Summary,
    /// No type given.
    Untyped,
}

impl MetricType {
    /// The word of the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Summary => "summary",
            MetricType::Untyped => "untyped",
        }
    }
}

/// Which line of a family a sample is: the family name itself, or a
/// summary's `_sum` / `_count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suffix {
    Bare,
    Sum,
    Count,
}

impl Suffix {
    fn as_str(self) -> &'static str {
        match self {
            Suffix::Bare => "",
            Suffix::Sum => "_sum",
            Suffix::Count => "_count",
        }
    }
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    suffix: Suffix,
    labels: Vec<(String, String)>,
    value: f64,
}

/// One metric family: its HELP, TYPE and samples.
#[derive(Debug, Clone, PartialEq)]
struct Family {
    help: String,
    kind: MetricType,
    series: Vec<Series>,
}

/// A set of metric families in the text exposition format 0.0.4.
///
/// The first sample of a family fixes its HELP and TYPE (later ones with
/// another help or type keep the first). A sample with the name, labels
/// and suffix of one already added replaces its value, so a family never
/// holds the same series twice. Output: families in name order, samples
/// in the order added, every line ending in `\n` (an empty exposition is
/// the empty string).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    families: BTreeMap<String, Family>,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    /// The names of its families, in output order.
    pub fn family_names(&self) -> impl Iterator<Item = &str> {
        self.families.keys().map(String::as_str)
    }

    /// Adds the sample `name{labels} value` of a counter, gauge or
    /// untyped family (for summaries see [`Exposition::summary`]). Label
    /// names are sanitized (see the module documentation); a label name
    /// given twice keeps its first value.
    pub fn sample(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let labels = label_pairs(labels.iter().copied());
        self.family(name, help, kind)
            .put(Suffix::Bare, labels, value);
    }

    /// Adds one summary: a `{quantile="q"}` sample per `(q, value)` and,
    /// when given, `_sum` and `_count`. A `quantile` label among `labels`
    /// is left out (the format reserves it).
    pub fn summary(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        quantiles: &[(f64, f64)],
        sum_and_count: Option<(f64, u64)>,
    ) {
        let base = label_pairs(labels.iter().copied().filter(|(k, _)| *k != "quantile"));
        let family = self.family(name, help, MetricType::Summary);
        for &(q, v) in quantiles {
            let mut with_q = base.clone();
            with_q.push(("quantile".to_owned(), format_value(q)));
            family.put(Suffix::Bare, with_q, v);
        }
        if let Some((sum, count)) = sum_and_count {
            family.put(Suffix::Sum, base.clone(), sum);
            family.put(Suffix::Count, base, count as f64);
        }
    }

    fn family(&mut self, name: &str, help: &str, kind: MetricType) -> &mut Family {
        self.families
            .entry(sanitize_metric_name(name))
            .or_insert_with(|| Family {
                help: help.to_owned(),
                kind,
                series: Vec::new(),
            })
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, family) in &self.families {
            out.push_str("# HELP ");
            out.push_str(name);
            if !family.help.is_empty() {
                out.push(' ');
                escape_help(&family.help, &mut out);
            }
            out.push('\n');
            let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
            for s in &family.series {
                out.push_str(name);
                out.push_str(s.suffix.as_str());
                if !s.labels.is_empty() {
                    out.push('{');
                    for (i, (k, v)) in s.labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(k);
                        out.push_str("=\"");
                        escape_label_value(v, &mut out);
                        out.push('"');
                    }
                    out.push('}');
                }
                out.push(' ');
                out.push_str(&format_value(s.value));
                out.push('\n');
            }
        }
        out
    }
}

impl Family {
    /// Adds a series, or replaces the value of the same series.
    fn put(&mut self, suffix: Suffix, labels: Vec<(String, String)>, value: f64) {
        if let Some(s) = self
            .series
            .iter_mut()
            .find(|s| s.suffix == suffix && s.labels == labels)
        {
            s.value = value;
        } else {
            self.series.push(Series {
                suffix,
                labels,
                value,
            });
        }
    }
}

/// Owned, sanitized label pairs; a repeated name keeps its first value.
fn label_pairs<'a>(labels: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in labels {
        let k = sanitize_label_name(k);
        if !out.iter().any(|(seen, _)| *seen == k) {
            out.push((k, v.to_owned()));
        }
    }
    out
}

fn name_char(c: char, colon: bool) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':')
}

fn sanitize(name: &str, colon: bool) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if name_char(c, colon) { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// `name` as a valid metric name: characters outside
/// `[a-zA-Z0-9_:]` become `_`; an empty name or one starting with a
/// digit gets a leading `_`. A valid name is returned unchanged.
pub fn sanitize_metric_name(name: &str) -> String {
    sanitize(name, true)
}

/// `name` as a valid label name (as [`sanitize_metric_name`], without
/// `:`).
pub fn sanitize_label_name(name: &str) -> String {
    sanitize(name, false)
}

/// Appends a label value with `\`, `"` and newline escaped.
fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Appends a HELP text with `\` and newline escaped.
fn escape_help(help: &str, out: &mut String) {
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A sample value as Prometheus' Go client writes it (`strconv`'s `'g'`
/// format, shortest digits): `NaN`, `+Inf`, `-Inf`; plain decimals for
/// exponents −4 to 5 (`1893`, `0.25`); otherwise scientific with a signed
/// two-digit-or-more exponent (`5e+10`, `1.442917315e+09`, `1e-05`).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `-1.2345e6`.
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::from(sign);
    if !(-4..6).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            for _ in digits.len()..int_len {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    }
    out
}

// ---------------------------------------------------------------------
// Port metrics
// ---------------------------------------------------------------------

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
/// | `rdmaperf_port_hw_counter_total` | `device, port, counter` | each `hw_counters/` file but `lifespan` |
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
                "rdmaperf_port_hw_counter_total",
                "A driver counter of the port (hw_counters/<counter>), raw; names and meanings vary by driver.",
                MetricType::Counter,
                &[("device", device), ("port", number.as_str()), ("counter", name.as_str())],
                value as f64,
            );
        }
    }
}

// ---------------------------------------------------------------------
// Result metrics
// ---------------------------------------------------------------------

/// The quantiles [`LatStats`] holds: `(quantile, microseconds)`. The
/// quantiles are written out, not divided from the percentiles: `99.9 /
/// 100.0` is not the `0.999` the label must show.
fn latency_quantiles(s: &LatStats) -> [(f64, f64); 5] {
    let [p50, p90, p99, p99_9, p99_99] = s.percentiles_us();
    [
        (0.5, p50),
        (0.9, p90),
        (0.99, p99),
        (0.999, p99_9),
        (0.9999, p99_99),
    ]
}

/// The results of one test run as Prometheus metrics: feed it every
/// [`SizeRecord`] and [`VerdictRecord`], then render. It only builds
/// text; writing the file is the caller's.
///
/// Labels of every result series (the "run labels"): `test` (the kind,
/// e.g. `write_bw`), `role`, `device`, `port` (this side), `peer_device`,
/// `peer_gid` (the GID of the peer in use, IPv6 notation); per size also
/// `size_bytes`; bandwidth series add `direction` and, for SEND and
/// WRITE-with-immediate tests, `measured_on`, when the run has them;
/// latency series add `reported` (`half_round_trip` or `round_trip`).
///
/// | family | type | value |
/// |---|---|---|
/// | `rdmaperf_run_info` | gauge | 1; adds `gid`, `gid_index`, `link_layer`, `rate`, `peer_port` |
/// | `rdmaperf_path_mtu_bytes` | gauge | path MTU |
/// | `rdmaperf_bandwidth_bits_per_second` | gauge | average bandwidth |
/// | `rdmaperf_bandwidth_bytes_per_second` | gauge | average bandwidth |
/// | `rdmaperf_bandwidth_peak_bits_per_second` | gauge | peak bandwidth |
/// | `rdmaperf_bandwidth_peak_bytes_per_second` | gauge | peak bandwidth |
/// | `rdmaperf_messages_per_second` | gauge | message rate |
/// | `rdmaperf_measurement_duration_seconds` | gauge | measured span (bandwidth) |
/// | `rdmaperf_latency_seconds` | summary | quantiles 0.5 … 0.9999, `_sum`, `_count` |
/// | `rdmaperf_latency_min_seconds`, `_max_seconds`, `_stddev_seconds` | gauge | |
/// | `rdmaperf_verdict_pass` | gauge | 1 pass, 0 fail; label `check` |
///
/// The latency summary's `_count` is the round trips measured and its
/// `_sum` is the reported mean × `_count`: [`LatStats`] keeps the mean,
/// not the sum, so `_sum / _count` is exactly the reported average (with
/// `--perftest-stats` that average leaves out the two largest samples,
/// as perftest does). A size with no sample has `NaN` quantiles.
///
/// Verdicts carry the run labels of the last size fed (none before
/// any), and `check`: `link_rate` (`--expect-rate`), `latency`
/// (`--max-latency`; with `size_bytes` and `percentile`), or the
/// perftest limit flag without dashes (`limit_bw`, `limit_msgrate`).
///
/// A size fed twice (same labels) keeps the last figures.
#[derive(Debug, Clone, Default)]
pub struct ResultMetrics {
    exposition: Exposition,
    run_labels: Vec<(String, String)>,
}

impl ResultMetrics {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one size's figures.
    pub fn size(&mut self, record: &SizeRecord<'_>) {
        let ctx = record.context;
        self.run_labels = run_labels(ctx);
        self.run_info(ctx);
        let mut labels = self.run_labels.clone();
        labels.push((
            "size_bytes".to_owned(),
            figures_bytes(&record.figures).to_string(),
        ));
        match &record.figures {
            Figures::Bw(bw) => {
                if let Some(d) = ctx.direction {
                    labels.push(("direction".to_owned(), d.to_owned()));
                }
                if let Some(m) = ctx.measured_on {
                    labels.push(("measured_on".to_owned(), m.to_owned()));
                }
                self.bandwidth(&as_refs(&labels), bw);
            }
            Figures::Lat(lat) => {
                let reported = if ctx.rtt_factor >= 2 {
                    "half_round_trip"
                } else {
                    "round_trip"
                };
                labels.push(("reported".to_owned(), reported.to_owned()));
                self.latency(&as_refs(&labels), lat);
            }
        }
    }

    fn run_info(&mut self, ctx: &RunContext) {
        let mut info = self.run_labels.clone();
        let gid_index = ctx
            .local
            .gid_index
            .map(|i| i.to_string())
            .unwrap_or_default();
        info.extend([
            ("gid".to_owned(), ctx.local.gid.clone()),
            ("gid_index".to_owned(), gid_index),
            ("link_layer".to_owned(), ctx.local.link_layer.clone()),
            (
                "rate".to_owned(),
                ctx.local.rate.clone().unwrap_or_default(),
            ),
            ("peer_port".to_owned(), ctx.remote.port.to_string()),
        ]);
        self.exposition.sample(
            "rdmaperf_run_info",
            "A test run: this side's GID, link layer and negotiated rate, the peer's port; always 1.",
            MetricType::Gauge,
            &as_refs(&info),
            1.0,
        );
        self.exposition.sample(
            "rdmaperf_path_mtu_bytes",
            "Path MTU of the run, bytes.",
            MetricType::Gauge,
            &as_refs(&self.run_labels),
            f64::from(ctx.mtu),
        );
    }

    fn bandwidth(&mut self, labels: &[(&str, &str)], bw: &BwResult) {
        let avg = bw.bw_avg_mib_s * MIB;
        let peak = bw.bw_peak_mib_s * MIB;
        let e = &mut self.exposition;
        let g = MetricType::Gauge;
        e.sample(
            "rdmaperf_bandwidth_bits_per_second",
            "Average bandwidth of the size, bits per second (both directions summed when bidirectional).",
            g,
            labels,
            avg * 8.0,
        );
        e.sample(
            "rdmaperf_bandwidth_bytes_per_second",
            "Average bandwidth of the size, bytes per second (both directions summed when bidirectional).",
            g,
            labels,
            avg,
        );
        e.sample(
            "rdmaperf_bandwidth_peak_bits_per_second",
            "Peak bandwidth of the size, bits per second.",
            g,
            labels,
            peak * 8.0,
        );
        e.sample(
            "rdmaperf_bandwidth_peak_bytes_per_second",
            "Peak bandwidth of the size, bytes per second.",
            g,
            labels,
            peak,
        );
        e.sample(
            "rdmaperf_messages_per_second",
            "Message rate of the size, messages per second.",
            g,
            labels,
            bw.msg_rate_mpps * 1e6,
        );
        e.sample(
            "rdmaperf_measurement_duration_seconds",
            "Measured span of the size, seconds.",
            g,
            labels,
            bw.elapsed_s,
        );
    }

    fn latency(&mut self, labels: &[(&str, &str)], lat: &LatStats) {
        let seconds = |us: f64| us / 1e6;
        let empty = lat.iterations == 0;
        let quantiles = latency_quantiles(lat).map(|(q, us)| {
            let value = if empty { f64::NAN } else { seconds(us) };
            (q, value)
        });
        let sum = if empty {
            0.0
        } else {
            seconds(lat.t_avg_us) * lat.iterations as f64
        };
        let e = &mut self.exposition;
        e.summary(
            "rdmaperf_latency_seconds",
            "Latency of the size, seconds (half or full round trips: label reported); _sum is the mean times _count.",
            labels,
            &quantiles,
            Some((sum, lat.iterations)),
        );
        if empty {
            return;
        }
        let g = MetricType::Gauge;
        e.sample(
            "rdmaperf_latency_min_seconds",
            "Smallest latency of the size, seconds.",
            g,
            labels,
            seconds(lat.t_min_us),
        );
        e.sample(
            "rdmaperf_latency_max_seconds",
            "Largest latency of the size, seconds.",
            g,
            labels,
            seconds(lat.t_max_us),
        );
        e.sample(
            "rdmaperf_latency_stddev_seconds",
            "Standard deviation of the latency of the size, seconds.",
            g,
            labels,
            seconds(lat.t_stdev_us),
        );
    }

    /// Adds a verdict as `rdmaperf_verdict_pass{…,check}` 1 or 0.
    pub fn verdict(&mut self, verdict: &VerdictRecord) {
        let mut labels = self.run_labels.clone();
        match verdict {
            VerdictRecord::Link(_) => labels.push(("check".to_owned(), "link_rate".to_owned())),
            VerdictRecord::Latency(v) => {
                labels.extend([
                    ("check".to_owned(), "latency".to_owned()),
                    ("size_bytes".to_owned(), v.bytes.to_string()),
                    ("percentile".to_owned(), v.percentile.clone()),
                ]);
            }
            VerdictRecord::Limit(v) => labels.push((
                "check".to_owned(),
                v.flag.trim_start_matches('-').to_owned(),
            )),
        }
        self.exposition.sample(
            "rdmaperf_verdict_pass",
            "Whether a check of the run passed: 1 pass, 0 fail.",
            MetricType::Gauge,
            &as_refs(&labels),
            if verdict.pass() { 1.0 } else { 0.0 },
        );
    }

    /// What has been added so far.
    pub fn exposition(&self) -> &Exposition {
        &self.exposition
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        self.exposition.render()
    }
}

/// The message size of a size's figures.
fn figures_bytes(figures: &Figures) -> u64 {
    match figures {
        Figures::Bw(bw) => bw.bytes,
        Figures::Lat(lat) => lat.bytes,
    }
}

/// The labels naming a run: test, role, this side, the peer.
fn run_labels(ctx: &RunContext) -> Vec<(String, String)> {
    vec![
        ("test".to_owned(), ctx.kind.to_owned()),
        ("role".to_owned(), ctx.role.to_owned()),
        ("device".to_owned(), ctx.local.device.clone()),
        ("port".to_owned(), ctx.local.port.to_string()),
        ("peer_device".to_owned(), ctx.remote.device.clone()),
        ("peer_gid".to_owned(), ctx.remote.gid.clone()),
    ]
}

fn as_refs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::ports::GidEntry;
    use crate::results::lat::LatVerdict;
    use crate::results::record::tests::context;
    use crate::results::verdict::LimitVerdict;

    /// Whether `name` matches `[a-zA-Z_:][a-zA-Z0-9_:]*` (checked by
    /// hand, not through `sanitize`).
    fn is_valid_metric_name(name: &str) -> bool {
        valid_name(name, true)
    }

    /// Whether `name` matches `[a-zA-Z_][a-zA-Z0-9_]*`.
    fn is_valid_label_name(name: &str) -> bool {
        valid_name(name, false)
    }

    fn valid_name(name: &str, colon: bool) -> bool {
        let mut chars = name.chars();
        match chars.next() {
            Some(first) if name_char(first, colon) && !first.is_ascii_digit() => {
                chars.all(|c| name_char(c, colon))
            }
            _ => false,
        }
    }

    /// The lines of `text` that start with `prefix`.
    fn lines_of<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn values_are_written_as_node_exporter_writes_them() {
        // Strings from node_exporter 1.5.0's /metrics on
        // tests/fixtures/sysfs/complete and from Go's
        // strconv.FormatFloat(v, 'g', -1, 64), which its client uses:
        // decimal for exponents -4..5, else d.ddde±XX.
        let cases: [(f64, &str); 20] = [
            (5e10, "5e+10"),
            (2.5e10, "2.5e+10"),
            (15_011_253_891_833_204.0, "1.5011253891833204e+16"),
            (1_442_917_315.0, "1.442917315e+09"),
            (31_877_402.0, "3.1877402e+07"),
            (1893.0, "1893"),
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (4187.0, "4187"),
            (312_500_000.0, "3.125e+08"),
            (123_456.0, "123456"),
            (1_000_000.0, "1e+06"),
            (0.25, "0.25"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.87e-6, "1.87e-06"),
            (-2.5, "-2.5"),
            (1e100, "1e+100"),
            (0.001022552, "0.001022552"),
        ];
        for (v, want) in cases {
            assert_eq!(format_value(v), want, "{v:e}");
        }
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        // Every value reads back as itself.
        for v in [1.0 / 3.0, 123.456e-7, 9_007_199_254_740_993.0, 6.02e23] {
            assert_eq!(format_value(v).parse::<f64>().unwrap(), v);
        }
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut e = Exposition::new();
        e.sample(
            "m",
            "a \\ back\nslash \"quoted\"",
            MetricType::Gauge,
            &[("v", "C:\\dir \"x\"\nnext")],
            1.0,
        );
        assert_eq!(
            e.render(),
            "# HELP m a \\\\ back\\nslash \"quoted\"\n\
             # TYPE m gauge\n\
             m{v=\"C:\\\\dir \\\"x\\\"\\nnext\"} 1\n"
        );
    }

    #[test]
    fn families_are_sorted_contiguous_and_declared_once() {
        let mut e = Exposition::new();
        e.sample("b_total", "B.", MetricType::Counter, &[("k", "1")], 1.0);
        e.sample("a", "A.", MetricType::Gauge, &[], 2.0);
        e.sample(
            "b_total",
            "other help",
            MetricType::Gauge,
            &[("k", "2")],
            3.0,
        );
        // The same series again replaces its value in place.
        e.sample("b_total", "B.", MetricType::Counter, &[("k", "1")], 4.0);
        e.sample("u", "", MetricType::Untyped, &[], f64::NAN);
        let text = e.render();
        assert_eq!(
            text,
            "# HELP a A.\n# TYPE a gauge\na 2\n\
             # HELP b_total B.\n# TYPE b_total counter\n\
             b_total{k=\"1\"} 4\nb_total{k=\"2\"} 3\n\
             # HELP u\n# TYPE u untyped\nu NaN\n"
        );
        assert!(text.ends_with('\n'));
        assert_eq!(e.family_names().collect::<Vec<_>>(), ["a", "b_total", "u"]);
        assert_eq!(Exposition::new().render(), "");
    }

    #[test]
    fn summaries_have_quantiles_sum_and_count() {
        let mut e = Exposition::new();
        e.summary(
            "rpc_seconds",
            "RPC.",
            &[("op", "x"), ("quantile", "dropped")],
            &[(0.5, 0.002), (0.99, 0.01)],
            Some((1.5, 300)),
        );
        assert_eq!(
            e.render(),
            "# HELP rpc_seconds RPC.\n# TYPE rpc_seconds summary\n\
             rpc_seconds{op=\"x\",quantile=\"0.5\"} 0.002\n\
             rpc_seconds{op=\"x\",quantile=\"0.99\"} 0.01\n\
             rpc_seconds_sum{op=\"x\"} 1.5\n\
             rpc_seconds_count{op=\"x\"} 300\n"
        );
    }

    #[test]
    fn bad_names_are_sanitized() {
        assert!(is_valid_metric_name("node_infiniband_info"));
        assert!(is_valid_metric_name("a:b_c9"));
        assert!(!is_valid_metric_name("9a"));
        assert!(!is_valid_metric_name(""));
        assert!(!is_valid_metric_name("a-b"));
        assert!(is_valid_label_name("_x1"));
        assert!(!is_valid_label_name("a:b"));
        assert_eq!(sanitize_metric_name("rx.bytes-total"), "rx_bytes_total");
        assert_eq!(sanitize_metric_name("9lives"), "_9lives");
        assert_eq!(sanitize_metric_name(""), "_");
        assert_eq!(sanitize_metric_name("a:b"), "a:b");
        assert_eq!(sanitize_label_name("a:b"), "a_b");
        assert_eq!(sanitize_label_name("é"), "_");
        let mut e = Exposition::new();
        e.sample(
            "bad name",
            "",
            MetricType::Gauge,
            &[("1x", "v"), ("1x", "w")],
            1.0,
        );
        assert_eq!(
            e.render(),
            "# HELP bad_name\n# TYPE bad_name gauge\nbad_name{_1x=\"v\"} 1\n"
        );
    }

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
            "rdmaperf_port_hw_counter_total{device=\"mlx5_0\",port=\"1\",counter=\"local_ack_timeout_err\"} 12\n"
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
            lines_of(&text, "rdmaperf_port_hw_counter_total"),
            [
                "rdmaperf_port_hw_counter_total{device=\"rxe0\",port=\"1\",counter=\"rcvd_seq_err\"} 0",
                "rdmaperf_port_hw_counter_total{device=\"rxe0\",port=\"1\",counter=\"sent_pkts\"} 1.048576e+06",
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

    fn bw_record_figures() -> BwResult {
        // 1000 messages of 64 KiB in 1 ms: 65.536 GB/s, 524.288 Gb/s,
        // 1 M messages/s.
        BwResult::from_measurement(&crate::results::bw::Measurement {
            size: 65_536,
            iterations: 1000,
            table_iterations: 1000,
            messages: 1000,
            elapsed_ns: 1_000_000,
            peak_msgs_per_sec: None,
            cpu_ns: 0,
            wall_ns: 1_000_000,
            system_cpu_pct: None,
            operations: 1000,
        })
    }

    /// The value of the one line of `text` that starts with `prefix`.
    fn value_of(text: &str, prefix: &str) -> f64 {
        let lines = lines_of(text, prefix);
        assert_eq!(lines.len(), 1, "{prefix}\n{text}");
        let (_, v) = lines[0].rsplit_once(' ').unwrap();
        v.parse().unwrap()
    }

    #[test]
    fn bandwidth_results_in_bits_and_bytes() {
        let ctx = context();
        let mut m = ResultMetrics::new();
        m.size(&SizeRecord {
            context: &ctx,
            figures: Figures::Bw(bw_record_figures()),
            peer_result: None,
            histogram: None,
            data_check: None,
        });
        let text = m.render();
        let labels = "{test=\"read_bw\",role=\"client\",device=\"rxe0\",port=\"1\",peer_device=\"rxe0\",peer_gid=\"fe80::1\",size_bytes=\"65536\",direction=\"unidirectional\"}";
        let bytes = value_of(
            &text,
            &format!("rdmaperf_bandwidth_bytes_per_second{labels} "),
        );
        assert!((bytes - 65.536e9).abs() < 1.0, "{bytes}");
        let bits = value_of(
            &text,
            &format!("rdmaperf_bandwidth_bits_per_second{labels} "),
        );
        assert!((bits - 524.288e9).abs() < 8.0, "{bits}");
        assert_eq!(bits, bytes * 8.0);
        let rate = value_of(&text, &format!("rdmaperf_messages_per_second{labels} "));
        assert!((rate - 1e6).abs() < 1e-3, "{rate}");
        assert_eq!(
            value_of(
                &text,
                &format!("rdmaperf_measurement_duration_seconds{labels} ")
            ),
            0.001
        );
        assert!(text.contains(
            "rdmaperf_path_mtu_bytes{test=\"read_bw\",role=\"client\",device=\"rxe0\",port=\"1\",peer_device=\"rxe0\",peer_gid=\"fe80::1\"} 1024\n"
        ));
        assert!(
            text.contains("gid_index=\"1\",link_layer=\"Ethernet\",rate=\"\",peer_port=\"1\"} 1\n")
        );
        for name in m.exposition().family_names() {
            assert!(is_valid_metric_name(name), "{name}");
        }
    }

    fn lat_stats(iterations: u64) -> LatStats {
        LatStats {
            bytes: 2,
            iterations,
            t_min_us: 1.5,
            t_max_us: 9.25,
            t_typical_us: 1.75,
            t_avg_us: 2.0,
            t_stdev_us: 0.5,
            p50_us: 1.75,
            p90_us: 2.25,
            p99_us: 4.0,
            p99_9_us: 8.0,
            p99_99_us: 9.25,
            exact_percentiles: true,
            system_cpu_util_pct: None,
        }
    }

    #[test]
    fn latency_is_a_summary_in_seconds() {
        let mut ctx = context();
        ctx.kind = "write_lat";
        ctx.rtt_factor = 2;
        let mut m = ResultMetrics::new();
        m.size(&SizeRecord {
            context: &ctx,
            figures: Figures::Lat(lat_stats(1000)),
            peer_result: None,
            histogram: None,
            data_check: None,
        });
        let text = m.render();
        let l = "test=\"write_lat\",role=\"client\",device=\"rxe0\",port=\"1\",peer_device=\"rxe0\",peer_gid=\"fe80::1\",size_bytes=\"2\",reported=\"half_round_trip\"";
        assert_eq!(
            lines_of(&text, "rdmaperf_latency_seconds"),
            [
                format!("rdmaperf_latency_seconds{{{l},quantile=\"0.5\"}} 1.75e-06"),
                format!("rdmaperf_latency_seconds{{{l},quantile=\"0.9\"}} 2.25e-06"),
                format!("rdmaperf_latency_seconds{{{l},quantile=\"0.99\"}} 4e-06"),
                format!("rdmaperf_latency_seconds{{{l},quantile=\"0.999\"}} 8e-06"),
                format!("rdmaperf_latency_seconds{{{l},quantile=\"0.9999\"}} 9.25e-06"),
                // mean 2 µs × 1000 round trips.
                format!("rdmaperf_latency_seconds_sum{{{l}}} 0.002"),
                format!("rdmaperf_latency_seconds_count{{{l}}} 1000"),
            ]
        );
        assert!(text.contains("# TYPE rdmaperf_latency_seconds summary\n"));
        assert!(text.contains(&format!("rdmaperf_latency_max_seconds{{{l}}} 9.25e-06\n")));
        assert!(text.contains(&format!("rdmaperf_latency_min_seconds{{{l}}} 1.5e-06\n")));
        assert!(text.contains(&format!("rdmaperf_latency_stddev_seconds{{{l}}} 5e-07\n")));

        // No sample: NaN quantiles, zero sum and count.
        let mut empty = ResultMetrics::new();
        empty.size(&SizeRecord {
            context: &ctx,
            figures: Figures::Lat(lat_stats(0)),
            peer_result: None,
            histogram: None,
            data_check: None,
        });
        let text = empty.render();
        assert!(text.contains(&format!(
            "rdmaperf_latency_seconds{{{l},quantile=\"0.5\"}} NaN\n"
        )));
        assert!(text.contains(&format!("rdmaperf_latency_seconds_count{{{l}}} 0\n")));
        assert!(!text.contains("rdmaperf_latency_min_seconds"));
    }

    #[test]
    fn verdicts_are_one_gauge_per_check() {
        let ctx = context();
        let mut m = ResultMetrics::new();
        m.verdict(&VerdictRecord::Limit(LimitVerdict::new(
            "--limit_bw",
            "average bandwidth",
            "MiB/sec",
            10.0,
            20.0,
        )));
        m.size(&SizeRecord {
            context: &ctx,
            figures: Figures::Bw(bw_record_figures()),
            peer_result: None,
            histogram: None,
            data_check: None,
        });
        m.verdict(&VerdictRecord::Latency(LatVerdict {
            pass: true,
            percentile: "p99".into(),
            measured_us: 1.8,
            max_us: 2.5,
            bytes: 2,
        }));
        let run = "test=\"read_bw\",role=\"client\",device=\"rxe0\",port=\"1\",peer_device=\"rxe0\",peer_gid=\"fe80::1\"";
        assert_eq!(
            lines_of(&m.render(), "rdmaperf_verdict_pass"),
            [
                "rdmaperf_verdict_pass{check=\"limit_bw\"} 0".to_owned(),
                format!(
                    "rdmaperf_verdict_pass{{{run},check=\"latency\",size_bytes=\"2\",percentile=\"p99\"}} 1"
                ),
            ]
        );
    }
}
