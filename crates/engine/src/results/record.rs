//! The records of a run, typed: one [`RunContext`] (who, what, where)
//! per run, one [`SizeRecord`] per size, an [`InterruptedRecord`] when a
//! run stops early. Verdicts are in [`crate::results::verdict`]; the
//! formats that show these records are in [`crate::format`](mod@crate::format).

use serde::Serialize;

use crate::bench::clock::ClockRecord;
use crate::bench::config::ConfigRecord;
use crate::results::bw::BwResult;
use crate::results::lat::LatStats;

/// Version of every JSON object rdmaperf writes (results, verdicts, the
/// device listing); bumped when a field changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 1;

/// A side as the reports describe it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideRecord {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// GID index in use.
    pub gid_index: Option<u32>,
    /// GID in use, IPv6 notation.
    pub gid: String,
    /// Path MTU in use, bytes.
    pub mtu: u32,
    /// `IB` or `Ethernet`.
    pub link_layer: String,
    /// Negotiated rate text, when known.
    pub rate: Option<String>,
}

/// Everything about a run that is the same for each of its sizes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunContext {
    /// The test's name, e.g. `read_bw` (the JSON `kind`).
    #[serde(skip)]
    pub kind: &'static str,
    /// `client` or `server`.
    pub role: &'static str,
    /// The configuration both sides ran.
    pub config: ConfigRecord,
    /// `unidirectional` or `bidirectional` (bandwidth tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<&'static str>,
    /// Where this side's figures were measured, when the two sides
    /// measure different things: `sender` (the send completions) or
    /// `receiver` (the receive completions) of a SEND or RDMA WRITE with
    /// immediate test.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_on: Option<&'static str>,
    /// Path MTU in use, bytes.
    pub mtu: u32,
    /// This side.
    pub local: SideRecord,
    /// The peer.
    pub remote: SideRecord,
    /// The clock of the samples (latency tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockRecord>,
    /// What the latency figures are, e.g. `half round trip (RTT/2),
    /// microseconds`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported: Option<&'static str>,
    /// Outstanding reads per QP both sides set (read tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outstanding_reads: Option<u32>,
    /// Each QP's path as the device reported it after connecting, when a
    /// path option was given (`-S`, `--tclass`, `--flow_label`,
    /// `--pkey_index`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub qp_paths: Vec<QpPathRecord>,
    /// Round trips per reported latency: 2 when the figures are half round
    /// trips (write), 1 for full ones (read); 1 for bandwidth tests.
    #[serde(skip)]
    pub rtt_factor: u32,
    /// Whether the QPs were connected through rdma_cm (`-R`); absent from
    /// the record when not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rdma_cm: bool,
    /// Whether the device is iWARP (perftest's JSON `Transport_type`).
    #[serde(skip)]
    pub iwarp: bool,
}

/// One QP's path, read back from the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QpPathRecord {
    /// The QP number.
    pub qpn: u32,
    /// Service level.
    pub sl: u8,
    /// GRH traffic class (`None`: no GRH).
    pub traffic_class: Option<u8>,
    /// GRH flow label (`None`: no GRH).
    pub flow_label: Option<u32>,
    /// P_Key index.
    pub pkey_index: u16,
}

/// The figures of one size.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Figures {
    /// Bandwidth figures (summed over both directions when bidirectional).
    Bw(BwResult),
    /// Latency statistics.
    Lat(LatStats),
}

/// What the data check of a size found: every byte the test moved into
/// this side's memory is the peer's pattern. (A mismatch is an error, not
/// a record.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DataCheck {
    /// Bytes compared.
    pub bytes_checked: u64,
}

/// One size of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeRecord<'a> {
    /// The run.
    pub context: &'a RunContext,
    /// The figures shown.
    pub figures: Figures,
    /// The peer's own figures, when it measured (bidirectional; on the
    /// server, the client's).
    pub peer_result: Option<BwResult>,
    /// The HdrHistogram, base64 (`--json-histogram`).
    pub histogram: Option<String>,
    /// The data check, when the test has one.
    pub data_check: Option<DataCheck>,
}

/// How an interrupted run ended: the last JSON line of its report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InterruptedRecord {
    /// What stopped it: `SIGINT`, `SIGTERM`, or `peer` (the peer
    /// reported that it was interrupted).
    pub by: String,
    /// This side's role.
    pub role: &'static str,
    /// Sizes whose results were reported before the interruption.
    pub sizes_completed: usize,
    /// Sizes the run was to measure.
    pub sizes_total: usize,
    /// The size being measured when the run stopped, if one was.
    pub size_in_progress: Option<u64>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bench::config::BwConfig;

    pub(crate) fn context() -> RunContext {
        let side = SideRecord {
            device: "rxe0".into(),
            port: 1,
            gid_index: Some(1),
            gid: "fe80::1".into(),
            mtu: 1024,
            link_layer: "Ethernet".into(),
            rate: None,
        };
        RunContext {
            kind: "read_bw",
            role: "client",
            config: ConfigRecord::Bw(BwConfig {
                qps: 1,
                ..BwConfig::default()
            }),
            direction: Some("unidirectional"),
            measured_on: None,
            mtu: 1024,
            local: side.clone(),
            remote: side,
            clock: None,
            reported: None,
            outstanding_reads: Some(16),
            qp_paths: Vec::new(),
            rtt_factor: 1,
            rdma_cm: false,
            iwarp: false,
        }
    }
}
