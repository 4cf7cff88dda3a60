//! The last `rdmaperf health` verdict as Prometheus metrics, for the
//! exporter's `/metrics` (`--health-state-dir`): read from the state file
//! the health runs keep, so a scrape never runs a check. Bounded: the
//! report has at most [`MAX_RAILS`] rails and [`MAX_DIRECTIONS`]
//! directions rendered, whatever the file says.
//!
//! | family | type | labels | value |
//! |---|---|---|---|
//! | `rdmaperf_health_state_read_success` | gauge | | the state file was read (1) or not (0) |
//! | `rdmaperf_health_verdict` | gauge | `verdict` (PASS, WARN, UNKNOWN, FAIL) | 1 for the last verdict, 0 for the others |
//! | `rdmaperf_health_last_run_timestamp_seconds` | gauge | | when the last run judged |
//! | `rdmaperf_health_last_run_duration_seconds` | gauge | | how long it took |
//! | `rdmaperf_health_checks` | gauge | `status` | checks of the last run per outcome |
//! | `rdmaperf_health_link_flaps` | gauge | `device`, `port` | link flaps in the flap window |
//! | `rdmaperf_health_flap_window_seconds` | gauge | | the window |
//! | `rdmaperf_health_errors_last_hour` | gauge | `device`, `port`, `counter` | the error counter's rise over the last hour (or the shorter span the state covers) |
//! | `rdmaperf_health_active_bandwidth_bytes_per_second` | gauge | `from`, `to` | the last active figure of a direction |
//! | `rdmaperf_health_baseline_ratio` | gauge | `from`, `to` | that figure over its baseline (once there is one) |

use crate::fabric::prom::text::{Exposition, MetricType};
use crate::health::{HealthReport, Status};

/// Most rails rendered.
pub const MAX_RAILS: usize = 64;
/// Most active directions rendered.
pub const MAX_DIRECTIONS: usize = 128;

/// Adds the health metrics of `report` (`None`: no readable state file)
/// to `x`.
pub fn add_health_metrics(x: &mut Exposition, report: Option<&HealthReport>) {
    x.sample(
        "rdmaperf_health_state_read_success",
        "Whether the rdmaperf health state file could be read (1) or not (0: missing, damaged, no run yet).",
        MetricType::Gauge,
        &[],
        if report.is_some() { 1.0 } else { 0.0 },
    );
    let Some(r) = report else { return };
    for s in [Status::Pass, Status::Warn, Status::Unknown, Status::Fail] {
        x.sample(
            "rdmaperf_health_verdict",
            "The last rdmaperf health verdict: 1 for its value, 0 for the others.",
            MetricType::Gauge,
            &[("verdict", s.word())],
            if r.verdict == s { 1.0 } else { 0.0 },
        );
        let n = r.checks.iter().filter(|c| c.status == s).count();
        x.sample(
            "rdmaperf_health_checks",
            "Checks of the last rdmaperf health run per outcome.",
            MetricType::Gauge,
            &[("status", s.word())],
            n as f64,
        );
    }
    x.sample(
        "rdmaperf_health_last_run_timestamp_seconds",
        "When the last rdmaperf health run judged (Unix time).",
        MetricType::Gauge,
        &[],
        r.time_s as f64,
    );
    x.sample(
        "rdmaperf_health_last_run_duration_seconds",
        "How long the last rdmaperf health run took.",
        MetricType::Gauge,
        &[],
        r.seconds,
    );
    for rail in r.rails.iter().take(MAX_RAILS) {
        let port = rail.port.to_string();
        let labels = [("device", rail.device.as_str()), ("port", port.as_str())];
        x.sample(
            "rdmaperf_health_link_flaps",
            "Link flaps of the port in the flap window (link_downed, carrier_changes / 2).",
            MetricType::Gauge,
            &labels,
            rail.flaps as f64,
        );
        x.sample(
            "rdmaperf_health_flap_window_seconds",
            "The window rdmaperf health counts link flaps in.",
            MetricType::Gauge,
            &[],
            rail.flap_window_s as f64,
        );
        for (counter, value) in [
            ("symbol_error", rail.symbol_errors),
            ("link_error_recovery", rail.link_error_recoveries),
        ] {
            if let Some(v) = value {
                x.sample(
                    "rdmaperf_health_errors_last_hour",
                    "The error counter's rise over the last hour (or the shorter span rdmaperf health's state covers).",
                    MetricType::Gauge,
                    &[labels[0], labels[1], ("counter", counter)],
                    v as f64,
                );
            }
        }
    }
    for d in r.directions.iter().take(MAX_DIRECTIONS) {
        let labels = [("from", d.from.as_str()), ("to", d.to.as_str())];
        x.sample(
            "rdmaperf_health_active_bandwidth_bytes_per_second",
            "The last rdmaperf health --active figure of a direction between two rails of this node.",
            MetricType::Gauge,
            &labels,
            d.gbps * 1e9 / 8.0,
        );
        if let Some(b) = d.baseline_gbps.filter(|b| *b > 0.0) {
            x.sample(
                "rdmaperf_health_baseline_ratio",
                "The direction's last figure over its baseline (the median of its last passing runs).",
                MetricType::Gauge,
                &labels,
                d.gbps / b,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Check, DirectionFigures, RailFigures};

    #[test]
    fn the_last_verdict_and_each_rails_figures_are_bounded_series() {
        let mut r = HealthReport::new(
            "n",
            1_700_000_000,
            true,
            vec![Check::new(
                "flap",
                Some("rxe1/1".into()),
                Status::Fail,
                "5 link flaps",
            )],
        );
        r.rails = (0..100)
            .map(|i| RailFigures {
                device: format!("mlx5_{i}"),
                port: 1,
                flaps: 5,
                flap_window_s: 86_400,
                symbol_errors: Some(3),
                link_error_recoveries: None,
            })
            .collect();
        r.directions = vec![DirectionFigures {
            from: "rxe0/1".into(),
            to: "rxe1/1".into(),
            gbps: 8.0,
            baseline_gbps: Some(10.0),
        }];
        let mut x = Exposition::new();
        add_health_metrics(&mut x, Some(&r));
        let text = x.render();
        assert!(
            text.contains("rdmaperf_health_verdict{verdict=\"FAIL\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("rdmaperf_health_verdict{verdict=\"PASS\"} 0\n"));
        assert!(text.contains("rdmaperf_health_link_flaps{device=\"mlx5_0\",port=\"1\"} 5\n"));
        assert_eq!(
            text.matches("rdmaperf_health_link_flaps{").count(),
            MAX_RAILS
        );
        assert!(text.contains(
            "rdmaperf_health_errors_last_hour{device=\"mlx5_0\",port=\"1\",counter=\"symbol_error\"} 3\n"
        ));
        assert!(
            text.contains("rdmaperf_health_baseline_ratio{from=\"rxe0/1\",to=\"rxe1/1\"} 0.8\n")
        );
        assert!(text.contains(
            "rdmaperf_health_active_bandwidth_bytes_per_second{from=\"rxe0/1\",to=\"rxe1/1\"} 1e+09\n"
        ));
        let mut none = Exposition::new();
        add_health_metrics(&mut none, None);
        assert_eq!(
            none.render().lines().last(),
            Some("rdmaperf_health_state_read_success 0")
        );
    }
}
