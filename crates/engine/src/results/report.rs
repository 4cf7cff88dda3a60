//! What every test reports, typed, and the one trait its output formats
//! implement. A run has one [`RunContext`] (who, what, where); each size
//! gives one [`SizeRecord`]; a verdict is a [`VerdictRecord`]. The formats
//! — perftest's tables ([`crate::results::bw::Table`], [`crate::results::lat::LatTable`])
//! and [`JsonLines`] — are [`Report`]s; Prometheus text will be another.

use std::io::{self, Write};

use serde::Serialize;

use crate::bench::clock::ClockRecord;
use crate::bench::config::BwConfig;
use crate::fabric::link::Verdict;
use crate::proto::wire::SideInfo;
use crate::results::bw::BwResult;
use crate::results::lat::{LatConfig, LatStats, LatVerdict};

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

impl From<&SideInfo> for SideRecord {
    fn from(s: &SideInfo) -> Self {
        Self {
            device: s.device.clone(),
            port: s.port,
            gid_index: s.gid_index,
            gid: crate::fabric::gid::to_ipv6_string(&s.gid),
            mtu: s.mtu,
            link_layer: s.link_layer.clone(),
            rate: s.rate.clone(),
        }
    }
}

/// The test configuration, as the client sent it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ConfigRecord {
    /// A bandwidth test.
    Bw(BwConfig),
    /// A latency test.
    Lat(LatConfig),
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

/// A verdict of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum VerdictRecord {
    /// `--expect-rate`: the link delivers what it negotiated.
    Link(Verdict),
    /// `--max-latency`: one size's latency.
    Latency(LatVerdict),
    /// perftest's `-w/--limit_bw` or `-y/--limit_msgrate`.
    Limit(LimitVerdict),
}

impl VerdictRecord {
    /// Whether it passed.
    pub fn pass(&self) -> bool {
        match self {
            Self::Link(v) => v.pass,
            Self::Latency(v) => v.pass,
            Self::Limit(v) => v.pass,
        }
    }

    /// Its human line, e.g. `verdict: PASS ...`.
    pub fn line(&self) -> String {
        match self {
            Self::Link(v) => v.line(),
            Self::Latency(v) => v.line(),
            Self::Limit(v) => v.line(),
        }
    }

    /// The exit code of a run this verdict fails: 3 for rdmaperf's
    /// verdicts, 1 for perftest's limits (as perftest exits).
    pub fn exit_code_on_fail(&self) -> u8 {
        match self {
            Self::Limit(_) => 1,
            _ => crate::results::report::EXIT_VERDICT_FAIL,
        }
    }
}

/// Exit code of a run whose rdmaperf verdict (link or latency) is FAIL.
pub const EXIT_VERDICT_FAIL: u8 = 3;

/// perftest's pass/fail limit (`-w/--limit_bw`, `-y/--limit_msgrate`):
/// the best figure over the sizes against the limit, as perftest passes a
/// run when any one report reaches it (equal passes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitVerdict {
    /// `verdict` kind: always `limit`.
    pub verdict: &'static str,
    /// The flag, e.g. `--limit_bw`.
    pub flag: &'static str,
    /// What was judged, e.g. `average bandwidth`.
    pub figure: &'static str,
    /// Its unit, e.g. `MiB/sec`.
    pub unit: &'static str,
    /// The best value measured.
    pub measured: f64,
    /// The limit.
    pub limit: f64,
    /// Whether `measured >= limit`.
    pub pass: bool,
}

impl LimitVerdict {
    /// Judges `measured` against `limit`.
    pub fn new(
        flag: &'static str,
        figure: &'static str,
        unit: &'static str,
        measured: f64,
        limit: f64,
    ) -> Self {
        Self {
            verdict: "limit",
            flag,
            figure,
            unit,
            measured,
            limit,
            pass: measured >= limit,
        }
    }

    /// `verdict: PASS average bandwidth 11498.77 MiB/sec >= 10000.00 (--limit_bw, best size)`.
    pub fn line(&self) -> String {
        format!(
            "verdict: {} {} {:.2} {} {} {:.2} ({}, best size)",
            if self.pass { "PASS" } else { "FAIL" },
            self.figure,
            self.measured,
            self.unit,
            if self.pass { ">=" } else { "<" },
            self.limit,
            self.flag
        )
    }

    /// perftest's own line on stderr when the limit fails.
    pub fn perftest_error(&self) -> &'static str {
        if self.flag == "--limit_bw" {
            "Error: BW result is below bw limit"
        } else {
            "Error: Msg rate  is below msg_rate limit"
        }
    }
}

/// An output format of the test results.
pub trait Report {
    /// Before the first size.
    ///
    /// # Errors
    /// I/O errors of the destination.
    fn begin(&mut self) -> io::Result<()>;
    /// One size.
    ///
    /// # Errors
    /// I/O errors of the destination.
    fn size(&mut self, record: &SizeRecord<'_>) -> io::Result<()>;
    /// A verdict, after [`Report::end`] (a table is closed by then; the
    /// verdict lines follow it).
    ///
    /// # Errors
    /// I/O errors of the destination.
    fn verdict(&mut self, verdict: &VerdictRecord) -> io::Result<()>;
    /// After the last size.
    ///
    /// # Errors
    /// I/O errors of the destination.
    fn end(&mut self) -> io::Result<()>;
    /// The run was interrupted (after [`Report::end`]): the last record.
    /// A table shows nothing more (the runner says it on stderr).
    ///
    /// # Errors
    /// I/O errors of the destination.
    fn interrupted(&mut self, _record: &InterruptedRecord) -> io::Result<()> {
        Ok(())
    }
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

/// JSON lines: one self-contained object per size,
/// `{"schema_version":1,"kind":"read_bw","role":...,"config":...,
/// "local":...,"remote":...,"result":{...}}` (plus `peer_result`,
/// `histogram`, `data_check` when present), and one
/// `{"schema_version":1,"kind":"verdict","verdict":{...}}` per verdict.
#[derive(Debug)]
pub struct JsonLines<W> {
    out: W,
}

impl<W: Write> JsonLines<W> {
    /// Writes to `out`.
    pub fn new(out: W) -> Self {
        Self { out }
    }

    fn line(&mut self, value: &impl Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

#[derive(Serialize)]
struct SizeLine<'a> {
    schema_version: u32,
    kind: &'static str,
    #[serde(flatten)]
    context: &'a RunContext,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_result: Option<&'a BwResult>,
    result: &'a Figures,
    #[serde(skip_serializing_if = "Option::is_none")]
    histogram: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_check: Option<&'a DataCheck>,
}

#[derive(Serialize)]
struct InterruptedLine<'a> {
    schema_version: u32,
    kind: &'static str,
    interrupted: &'a InterruptedRecord,
}

#[derive(Serialize)]
struct VerdictLine<'a> {
    schema_version: u32,
    kind: &'static str,
    verdict: &'a VerdictRecord,
}

impl<W: Write> Report for JsonLines<W> {
    fn begin(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn size(&mut self, r: &SizeRecord<'_>) -> io::Result<()> {
        self.line(&SizeLine {
            schema_version: SCHEMA_VERSION,
            kind: r.context.kind,
            context: r.context,
            peer_result: r.peer_result.as_ref(),
            result: &r.figures,
            histogram: r.histogram.as_deref(),
            data_check: r.data_check.as_ref(),
        })
    }

    fn verdict(&mut self, verdict: &VerdictRecord) -> io::Result<()> {
        self.line(&VerdictLine {
            schema_version: SCHEMA_VERSION,
            kind: "verdict",
            verdict,
        })
    }

    fn end(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn interrupted(&mut self, interrupted: &InterruptedRecord) -> io::Result<()> {
        self.line(&InterruptedLine {
            schema_version: SCHEMA_VERSION,
            kind: "interrupted",
            interrupted,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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
        }
    }

    #[test]
    fn json_lines_merge_context_and_result() {
        let ctx = context();
        let r = BwResult::from_measurement(&crate::results::bw::Measurement {
            size: 2,
            iterations: 10,
            table_iterations: 10,
            messages: 10,
            elapsed_ns: 1_000,
            peak_msgs_per_sec: None,
            cpu_ns: 500,
            wall_ns: 1_000,
            system_cpu_pct: None,
            operations: 10,
        });
        let mut out = Vec::new();
        let mut j = JsonLines::new(&mut out);
        let rec = SizeRecord {
            context: &ctx,
            figures: Figures::Bw(r),
            peer_result: None,
            histogram: None,
            data_check: Some(DataCheck { bytes_checked: 20 }),
        };
        j.size(&rec).unwrap();
        j.size(&rec).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["kind"], "read_bw");
        assert_eq!(v["role"], "client");
        assert_eq!(v["config"]["qps"], 1);
        assert_eq!(v["local"]["device"], "rxe0");
        assert_eq!(v["outstanding_reads"], 16);
        assert_eq!(v["result"]["bytes"], 2);
        assert_eq!(v["data_check"]["bytes_checked"], 20);
        assert!(v.get("peer_result").is_none() && v.get("clock").is_none());
        assert!(v["result"]["bw_avg_gbps"].is_number());
    }
}
