//! The JSON lines report: every size, verdict and interruption of a run as
//! one self-contained, typed JSON object per line.

use std::io::{self, Write};

use serde::Serialize;

use crate::format::report::Report;
use crate::results::bw::BwResult;
use crate::results::record::{
    DataCheck, Figures, InterruptedRecord, RunContext, SCHEMA_VERSION, SizeRecord,
};
use crate::results::verdict::VerdictRecord;

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
mod tests {
    use super::*;
    use crate::bench::config::{ConfigRecord, LatConfig};
    use crate::results::lat::{LatStats, Percentile, lat_verdict, tests::recorder};
    use crate::results::record::tests::context;

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

    #[test]
    fn json_lines_merge_context_result_and_histogram() {
        let r = recorder(&[2000, 4000, 6000, 8000], 4);
        let s = r.stats(2);
        let b64 = r.histogram_base64();
        let ctx = RunContext {
            kind: "write_lat",
            config: ConfigRecord::Lat(LatConfig {
                iters: 4,
                ..LatConfig::default()
            }),
            ..context()
        };
        let rec = |histogram: Option<String>| SizeRecord {
            context: &ctx,
            figures: Figures::Lat(s),
            peer_result: None,
            histogram,
            data_check: None,
        };
        let mut out = Vec::new();
        let mut j = JsonLines::new(&mut out);
        j.begin().unwrap();
        j.size(&rec(Some(b64.clone()))).unwrap();
        j.size(&rec(None)).unwrap();
        j.verdict(&VerdictRecord::Latency(lat_verdict(
            &s,
            Percentile::Median,
            5.0,
        )))
        .unwrap();
        j.end().unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        let v = &lines[0];
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["kind"], "write_lat");
        assert_eq!(v["config"]["iters"], 4);
        assert_eq!(v["local"]["device"], "rxe0");
        let res = &v["result"];
        assert_eq!(res["bytes"], 2);
        assert_eq!(res["iterations"], 4);
        for key in [
            "t_min_us",
            "t_max_us",
            "t_typical_us",
            "t_avg_us",
            "t_stdev_us",
            "p50_us",
            "p90_us",
            "p99_us",
            "p99_9_us",
            "p99_99_us",
        ] {
            assert!(res[key].is_number(), "{key}");
        }
        assert_eq!(res["exact_percentiles"], true);
        assert_eq!(v["histogram"], b64.as_str());
        assert!(lines[1].get("histogram").is_none());
        assert_eq!(lines[2]["verdict"]["pass"], true);
        let back: LatStats = serde_json::from_value(res.clone()).unwrap();
        assert_eq!(back, s);
    }
}
