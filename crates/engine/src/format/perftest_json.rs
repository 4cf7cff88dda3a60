//! perftest's `--out_json` report, as its scripts parse it: one JSON
//! object, one key per line, in perftest's order and spelling
//! (`write_test_info_to_file` and the `*_JSON` formats of perftest's
//! `src/perftest_parameters.{c,h}`), rewritten after every size so that —
//! as in perftest — the file holds the last one. rdmaperf's own `--json`
//! (every size, typed) is [`crate::format::json_lines::JsonLines`].

use std::fmt::Write as _;

use crate::bench::config::ConfigRecord;
use crate::format::table::TableStyle;
use crate::results::record::{Figures, RunContext, SizeRecord};

/// perftest's default `--out_json_file`.
pub const DEFAULT_FILE: &str = "perftest_out.json";

/// The figure `--output` selects (perftest's verbosity levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFigure {
    /// `--output=bandwidth`: the average bandwidth in the table's unit.
    Bandwidth,
    /// `--output=message_rate`: the message rate, Mpps.
    MessageRate,
    /// `--output=latency`: the average latency, usec.
    Latency,
}

impl std::str::FromStr for OutputFigure {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bandwidth" => Ok(Self::Bandwidth),
            "message_rate" => Ok(Self::MessageRate),
            "latency" => Ok(Self::Latency),
            _ => Err(format!(
                "{s:?} is not an output level: bandwidth, message_rate (bandwidth tests) or latency (latency tests)"
            )),
        }
    }
}

impl OutputFigure {
    /// The number `--output` prints for a size (`"%lf\n"` in perftest:
    /// six decimals), or `None` when the figures are of the other metric.
    pub fn value(self, figures: &Figures, style: TableStyle) -> Option<f64> {
        match (self, figures) {
            (Self::Bandwidth, Figures::Bw(r)) => Some(style.bandwidths(r).1),
            (Self::MessageRate, Figures::Bw(r)) => Some(r.msg_rate_mpps),
            (Self::Latency, Figures::Lat(s)) => Some(s.t_avg_us),
            _ => None,
        }
    }
}

/// The file's text for one size: `title` is the test's perftest title
/// (`RDMA_Write BW Test`), `style` how the bandwidth table shows figures,
/// `output` the `--output` figure when one was chosen.
pub fn render(
    title: &str,
    record: &SizeRecord<'_>,
    style: TableStyle,
    output: Option<OutputFigure>,
) -> String {
    let mut s = String::from("{\n");
    test_info(&mut s, title, record.context);
    s.push_str("\"results\": {\n");
    match (output, &record.figures) {
        (Some(f), figures) => {
            let duration =
                matches!(&record.context.config, ConfigRecord::Lat(c) if c.duration.is_some());
            let key = match f {
                OutputFigure::Bandwidth => "bw_avg",
                OutputFigure::MessageRate => "msgRate_avg",
                // perftest's print_report_lat and print_report_lat_duration.
                OutputFigure::Latency if duration => "t_avg",
                OutputFigure::Latency => "avg_lat",
            };
            let v = f.value(figures, style).unwrap_or(0.0);
            let _ = writeln!(s, "\"{key}\": {v:.6}");
        }
        (None, Figures::Bw(r)) => {
            let (peak, avg) = style.bandwidths(r);
            let prec = if style.extended(r) { 6 } else { 2 };
            let _ = write!(
                s,
                "\"MsgSize\": {},\n\"n_iterations\": {},\n\"BW_peak\": {peak:.prec$},\n\
                 \"BW_average\": {avg:.prec$},\n\"MsgRate\": {:.6}",
                r.bytes,
                TableStyle::iterations(r),
                r.msg_rate_mpps
            );
            cpu_tail(
                &mut s,
                style
                    .cpu_column
                    .then(|| r.system_cpu_util_pct.unwrap_or(0.0)),
            );
        }
        (None, Figures::Lat(l)) => {
            let duration =
                matches!(&record.context.config, ConfigRecord::Lat(c) if c.duration.is_some());
            if duration {
                let _ = write!(
                    s,
                    "\"MsgSize\": {},\n\"n_iterations\": {},\n\"t_avg\": {:.2},\n\"tps_average\": {:.2}",
                    l.bytes,
                    l.iterations,
                    l.t_avg_us,
                    crate::results::lat::tps(l, record.context.rtt_factor)
                );
                cpu_tail(&mut s, l.system_cpu_util_pct);
            } else {
                let _ = write!(
                    s,
                    "\"MsgSize\": {},\n\"n_iterations\": {},\n\"t_min\": {:.2},\n\"t_max\": {:.2},\n\
                     \"t_typical\": {:.2},\n\"t_avg\": {:.2},\n\"t_stdev\": {:.2},\n\
                     \"percentile_99\": {:.2},\n\"percentile_99.9\": {:.2}",
                    l.bytes,
                    l.iterations,
                    l.t_min_us,
                    l.t_max_us,
                    l.t_typical_us,
                    l.t_avg_us,
                    l.t_stdev_us,
                    l.p99_us,
                    l.p99_9_us
                );
                // perftest has no CPU figure outside duration mode.
                cpu_tail(&mut s, None);
            }
        }
    }
    s.push_str("}\n}\n");
    s
}

/// `REPORT_EXT_JSON` or `REPORT_EXT_CPU_UTIL_JSON`.
fn cpu_tail(s: &mut String, cpu: Option<f64>) {
    match cpu {
        Some(c) => {
            let _ = writeln!(s, ",\n\"CPU_util\": {c:.2}");
        }
        None => s.push('\n'),
    }
}

/// perftest's `test_info` object, for what rdmaperf runs: RC, no SRQ, no
/// dual port, rdma_cm as the run connected, host memory, `ibv_post_send`, no PCIe relaxed
/// ordering.
fn test_info(s: &mut String, title: &str, ctx: &RunContext) {
    let on_off = |b: bool| if b { "ON" } else { "OFF" };
    let (qps, tx_depth, cq_mod, post_list, bidirectional, inline) = match &ctx.config {
        ConfigRecord::Bw(c) => (
            c.qps,
            c.tx_depth,
            Some(c.cq_mod),
            c.post_list,
            c.bidirectional,
            c.inline_size,
        ),
        ConfigRecord::Lat(c) => (1, 1, None, 1, false, c.inline_size),
    };
    // "RDMA_Write BW Test" -> "RDMA_Write_BW_Test" (perftest's words for
    // -b and -l included).
    let words = crate::format::banner::title_words(title, post_list, bidirectional);
    let _ = writeln!(s, "\"test_info\": {{\n\"test\": \"{}\",", words.join("_"));
    let _ = writeln!(
        s,
        "\"Dual_port\": \"OFF\",\n\"Device\": \"{}\",",
        json_text(&ctx.local.device)
    );
    let _ = writeln!(
        s,
        "\"Number_of_qps\": {qps},\n\"Transport_type\": \"{}\",",
        crate::format::banner::transport_name(ctx.iwarp)
    );
    let _ = writeln!(s, "\"Connection_type\": \"RC\",\n\"Using_SRQ\": \"OFF\",");
    let _ = writeln!(s, "\"PCIe_relax_order\": \"OFF\",");
    let _ = writeln!(s, "\"ibv_wr_API\": \"OFF\",");
    if ctx.role == "client" || bidirectional {
        let _ = writeln!(s, "\"TX_depth\": {tx_depth},");
    }
    if post_list > 1 {
        let _ = writeln!(s, "\"Post_List\": {post_list},");
    }
    if let Some(q) = cq_mod {
        let _ = writeln!(s, "\"CQ_Moderation\": {q},");
    }
    let _ = writeln!(s, "\"Mtu\": {},", ctx.mtu);
    let link = if ctx.local.link_layer == "Ethernet" {
        "Ethernet"
    } else {
        "IB"
    };
    let _ = writeln!(s, "\"Link_type\": \"{link}\",");
    if let Some(g) = ctx.local.gid_index {
        let _ = writeln!(s, "\"GID_index\": {g},");
    }
    match ctx.outstanding_reads {
        Some(o) => {
            let _ = writeln!(s, "\"Outstand_reads\": {o},");
        }
        None => {
            let _ = writeln!(s, "\"Max_inline_data\": {inline},");
        }
    }
    let _ = writeln!(s, "\"rdma_cm_QPs\": \"{}\",", on_off(ctx.rdma_cm));
    s.push_str("\"Use_ROCm_memory\": \"OFF\",\n\"Use_MUSA_memory\": \"OFF\",\n");
    s.push_str("\"Data_ex_method\": \"Ethernet\"\n},\n");
}

/// A device name as JSON string content (names are plain, but a string is
/// a string).
fn json_text(t: &str) -> String {
    let quoted = serde_json::to_string(t).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or("")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::printf::{CArg::*, sprintf};
    use crate::format::table::Unit;
    use crate::results::bw::BwResult;

    // perftest_parameters.h, verbatim.
    const REPORT_FMT_JSON: &str = "\"MsgSize\": %lu,\n\"n_iterations\": %lu,\n\"BW_peak\": %.2lf,\n\"BW_average\": %.2lf,\n\"MsgRate\": %.6lf";
    const REPORT_EXT_CPU_UTIL_JSON: &str = ",\n\"CPU_util\": %.2f\n";
    const REPORT_FMT_LAT_JSON: &str = "\"MsgSize\": %lu,\n\"n_iterations\": %lu,\n\"t_min\": %.2f,\n\"t_max\": %.2f,\n\"t_typical\": %.2f,\n\"t_avg\": %.2f,\n\"t_stdev\": %.2f,\n\"percentile_99\": %.2f,\n\"percentile_99.9\": %.2f";
    const REPORT_FMT_LAT_DUR_JSON: &str =
        "\"MsgSize\": %lu,\n\"n_iterations\": %lu,\n\"t_avg\": %.2f,\n\"tps_average\": %.2f";

    fn bw() -> BwResult {
        BwResult {
            bytes: 65536,
            iterations: 5000,
            table_iterations: 5000,
            messages: 5000,
            elapsed_s: 1.0,
            bw_peak_mib_s: 11520.34,
            bw_avg_mib_s: 11498.77,
            bw_peak_gbps: 96.6,
            bw_avg_gbps: 96.4,
            msg_rate_mpps: 0.18398,
            cpu_util_pct: 50.0,
            system_cpu_util_pct: Some(2.5),
            operations: 5000,
        }
    }

    fn record<'a>(ctx: &'a RunContext, figures: Figures) -> SizeRecord<'a> {
        SizeRecord {
            context: ctx,
            figures,
            peer_result: None,
            histogram: None,
            data_check: None,
        }
    }

    #[test]
    fn bandwidth_file_is_perftests_layout_and_valid_json() {
        let mut ctx = crate::results::record::tests::context();
        ctx.role = "client";
        ctx.outstanding_reads = None;
        let text = render(
            "RDMA_Write BW Test",
            &record(&ctx, Figures::Bw(bw())),
            TableStyle::default(),
            None,
        );
        let results = sprintf(
            REPORT_FMT_JSON,
            &[U(65536), U(5000), F(11520.34), F(11498.77), F(0.18398)],
        );
        assert!(
            text.ends_with(&format!("\"results\": {{\n{results}\n}}\n}}\n")),
            "{text}"
        );
        assert!(
            text.starts_with(
                "{\n\"test_info\": {\n\"test\": \"RDMA_Write_BW_Test\",\n\"Dual_port\": \"OFF\",\n"
            ),
            "{text}"
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["results"]["n_iterations"], 5000);
        assert_eq!(v["test_info"]["Connection_type"], "RC");
        assert!(v["test_info"]["TX_depth"].is_u64());
        // No peak and a CPU column: 0.00 and perftest's CPU_util key.
        let style = TableStyle {
            unit: Unit::MibPerSec,
            peak: false,
            cpu_column: true,
        };
        let text = render(
            "RDMA_Write BW Test",
            &record(&ctx, Figures::Bw(bw())),
            style,
            None,
        );
        let results = sprintf(
            REPORT_FMT_JSON,
            &[U(65536), U(5000), F(0.0), F(11498.77), F(0.18398)],
        ) + &sprintf(REPORT_EXT_CPU_UTIL_JSON, &[F(2.5)]);
        assert!(text.contains(&results), "{text}");
        serde_json::from_str::<serde_json::Value>(&text).unwrap();
        // --output: the one figure, valid JSON (perftest leaves a comma).
        let text = render(
            "RDMA_Write BW Test",
            &record(&ctx, Figures::Bw(bw())),
            TableStyle::default(),
            Some(OutputFigure::Bandwidth),
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["results"]["bw_avg"], 11498.77);
    }

    #[test]
    fn latency_file_has_perftests_keys_in_both_modes() {
        let mut ctx = crate::results::record::tests::context();
        let mut cfg = crate::bench::config::LatConfig::default();
        ctx.config = ConfigRecord::Lat(cfg.clone());
        ctx.outstanding_reads = None;
        ctx.rtt_factor = 2;
        let stats = crate::results::lat::tests::stats();
        let text = render(
            "RDMA_Write Latency Test",
            &record(&ctx, Figures::Lat(stats)),
            TableStyle::default(),
            None,
        );
        let s = &stats;
        let results = sprintf(
            REPORT_FMT_LAT_JSON,
            &[
                U(s.bytes),
                U(s.iterations),
                F(s.t_min_us),
                F(s.t_max_us),
                F(s.t_typical_us),
                F(s.t_avg_us),
                F(s.t_stdev_us),
                F(s.p99_us),
                F(s.p99_9_us),
            ],
        );
        assert!(text.contains(&format!("{results}\n}}\n}}\n")), "{text}");
        assert!(text.contains("\"test\": \"RDMA_Write_Latency_Test\""));
        assert!(!text.contains("CQ_Moderation"));
        serde_json::from_str::<serde_json::Value>(&text).unwrap();
        cfg.duration = Some(crate::bench::config::DurationMode {
            seconds: 2.0,
            margin: 0.0,
        });
        ctx.config = ConfigRecord::Lat(cfg);
        let text = render(
            "RDMA_Write Latency Test",
            &record(&ctx, Figures::Lat(stats)),
            TableStyle::default(),
            None,
        );
        let tps = crate::results::lat::tps(s, 2);
        let results = sprintf(
            REPORT_FMT_LAT_DUR_JSON,
            &[U(s.bytes), U(s.iterations), F(s.t_avg_us), F(tps)],
        );
        assert!(text.contains(&format!("{results}\n}}\n")), "{text}");
        serde_json::from_str::<serde_json::Value>(&text).unwrap();
    }
}
