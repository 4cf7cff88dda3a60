//! The results of a test run as Prometheus metrics ([`ResultMetrics`],
//! for `--prom FILE`), fed with its [`SizeRecord`]s and [`VerdictRecord`]s.

use crate::fabric::prom::text::{Exposition, MetricType};
use crate::results::bw::{BwResult, MIB};
use crate::results::lat::LatStats;
use crate::results::record::{Figures, RunContext, SizeRecord};
use crate::results::verdict::VerdictRecord;

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
/// | `rdmaperf_bandwidth_bytes_per_second` | gauge | average bandwidth |
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
            "rdmaperf_bandwidth_bytes_per_second",
            "Average bandwidth of the size, bytes per second (both directions summed when bidirectional).",
            g,
            labels,
            avg,
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
    use crate::fabric::prom::text::tests::{is_valid_metric_name, lines_of};
    use crate::results::lat::LatVerdict;
    use crate::results::record::tests::context;
    use crate::results::verdict::LimitVerdict;

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
    fn bandwidth_results_in_bytes() {
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
        // Prometheus' base unit is bytes: no bits series (promtool).
        assert!(!text.contains("bits"), "{text}");
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
