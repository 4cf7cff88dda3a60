//! Link validation: the negotiated rate and the error counters of a port,
//! as read from sysfs by the caller (the CLI's `sysfs` module), and the
//! pass/fail verdict that compares a measured bandwidth with what the link
//! should carry. Nothing here reads a file: it classifies and judges the
//! texts and values it is given. Where they come from:
//!
//! - `<root>/class/infiniband/<dev>/ports/<n>/rate` holds the negotiated
//!   rate, e.g. `400 Gb/sec (4X NDR)`.
//! - `ports/<n>/counters/` holds the standard PMA counters (absent on
//!   rxe); only the error counters among them are watched, never the data
//!   counters (`port_xmit_data`, …).
//! - `ports/<n>/hw_counters/` holds driver-specific counters; those whose
//!   names say error, discard, drop, link down, out-of-sequence, duplicate
//!   or retry are watched.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::str::FromStr;

use serde::Serialize;

use crate::results::verdict::{Verdict, below_threshold};

/// Why a rate, a flag value or a sysfs file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A rate text is not of the form `<number> Gb/sec …`.
    #[error(
        "cannot parse link rate {text:?}{}: expected e.g. \"400 Gb/sec (4X NDR)\"",
        in_file(.path)
    )]
    BadRate {
        /// The text, trimmed.
        text: String,
        /// The file it came from, when it came from one.
        path: Option<PathBuf>,
    },
    /// The rate file could not be read.
    #[error("cannot read link rate from {}: {source}", .path.display())]
    ReadRate {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// `--expect-rate` is neither `auto` nor a positive number.
    #[error(
        "invalid --expect-rate {value:?}: expected \"auto\" or a positive number of Gb/s (e.g. 200, 400)"
    )]
    BadExpectRate {
        /// The value given.
        value: String,
    },
    /// `--min-efficiency` is not a number in (0, 1].
    #[error(
        "invalid --min-efficiency {value:?}: expected a number greater than 0 and at most 1 (e.g. 0.9)"
    )]
    BadEfficiency {
        /// The value given.
        value: String,
    },
}

fn in_file(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => format!(" in {}", p.display()),
        None => String::new(),
    }
}

/// What the kernel's rate text says in parentheses, trimmed: `4X NDR` of
/// `400 Gb/sec (4X NDR)`.
pub fn rate_detail(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once('(')?;
    let (inside, _) = rest.split_once(')')?;
    Some(inside.trim())
}

/// A negotiated link rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkRate {
    /// Data rate in Gb/s, e.g. `400.0`.
    pub gbps: f64,
    /// The kernel's text, trimmed, e.g. `400 Gb/sec (4X NDR)`.
    pub text: String,
}

impl LinkRate {
    /// The rate for a reason: `100 Gb/s (2X HDR)`.
    fn describe(&self) -> String {
        let detail = rate_detail(&self.text).filter(|inside| !inside.is_empty());
        match detail {
            Some(d) => format!("{} Gb/s ({d})", self.gbps),
            None => format!("{} Gb/s", self.gbps),
        }
    }
}

/// Number of lanes of a port's raw `active_width` (1 = 1X, 2 = 4X, 4 = 8X,
/// 8 = 12X, 16 = 2X), if known.
pub fn lanes(active_width: u8) -> Option<u32> {
    match active_width {
        1 => Some(1),
        2 => Some(4),
        4 => Some(8),
        8 => Some(12),
        16 => Some(2),
        _ => None,
    }
}

/// Speed name and data rate per lane in Gb/s of a port's raw
/// `active_speed` (1 SDR, 2 DDR, 4 QDR, 8 FDR10, 16 FDR, 32 EDR, 64 HDR,
/// 128 NDR), if known.
pub fn lane_speed(active_speed: u8) -> Option<(&'static str, f64)> {
    match active_speed {
        1 => Some(("SDR", 2.5)),
        2 => Some(("DDR", 5.0)),
        4 => Some(("QDR", 10.0)),
        8 => Some(("FDR10", 10.0)),
        16 => Some(("FDR", 14.0)),
        32 => Some(("EDR", 25.0)),
        64 => Some(("HDR", 50.0)),
        128 => Some(("NDR", 100.0)),
        _ => None,
    }
}

/// Data rate in Gb/s (lanes × per-lane rate) of raw width and speed, if
/// both are known.
pub fn width_speed_gbps(active_width: u8, active_speed: u8) -> Option<f64> {
    Some(f64::from(lanes(active_width)?) * lane_speed(active_speed)?.1)
}

/// Parses the kernel's rate text, e.g. `400 Gb/sec (4X NDR)` → 400.0 or
/// `2.5 Gb/sec (1X SDR)` → 2.5. Surrounding whitespace is ignored; the
/// part after `Gb/sec` is kept in [`LinkRate::text`] but not interpreted.
///
/// # Errors
/// [`LinkError::BadRate`] naming the text when it does not start with a
/// positive, finite number followed by `Gb/sec`.
pub fn parse_rate(text: &str) -> Result<LinkRate, LinkError> {
    let trimmed = text.trim();
    let bad = || LinkError::BadRate {
        text: trimmed.to_owned(),
        path: None,
    };
    let mut words = trimmed.split_whitespace();
    let number = words.next().ok_or_else(bad)?;
    let unit = words.next().ok_or_else(bad)?;
    if !number.starts_with(|c: char| c.is_ascii_digit()) || unit != "Gb/sec" {
        return Err(bad());
    }
    let gbps: f64 = number.parse().map_err(|_| bad())?;
    if !gbps.is_finite() || gbps <= 0.0 {
        return Err(bad());
    }
    Ok(LinkRate {
        gbps,
        text: trimmed.to_owned(),
    })
}

/// The error counters of one port at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CounterSnapshot {
    /// Value of every readable error counter, keyed by its path below the
    /// port directory, e.g. `counters/symbol_error` or
    /// `hw_counters/rcvd_seq_err`.
    pub counters: BTreeMap<String, u64>,
}

/// The standard PMA counters (`ports/<n>/counters/`) that count errors.
const PMA_ERROR_COUNTERS: [&str; 12] = [
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
];

/// Word stems that mark a driver counter (`ports/<n>/hw_counters/`) as an
/// error counter when a `_`-separated word of its name starts with one,
/// e.g. rxe's `rcvd_seq_err`, `duplicate_request`, `retry_exceeded_err`,
/// mlx5's `req_cqe_error`, `req_transport_retries_exceeded`. Whole words,
/// so that `ack_deferred` is not taken for an error.
const HW_ERROR_STEMS: [&str; 8] = [
    "err",
    "discard",
    "drop",
    "downed",
    "duplicate",
    "retry",
    "retries",
    "exceeded",
];

/// Word stems that name an error (rather than a retry) in a counter that
/// otherwise counts traffic, e.g. `rx_dropped_pkts`.
const HW_LOSS_STEMS: [&str; 3] = ["err", "discard", "drop"];

/// Suffixes of driver counters that count traffic, not errors (unless the
/// name also has a word of [`HW_LOSS_STEMS`]).
const HW_TRAFFIC_SUFFIXES: [&str; 5] = ["pkts", "packets", "bytes", "sends", "recvs"];

/// Whether a `hw_counters/` name is an error counter.
fn is_hw_error_counter(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let has_word = |stems: &[&str]| {
        lower
            .split('_')
            .any(|word| stems.iter().any(|stem| word.starts_with(stem)))
    };
    // rxe's out_of_seq_request, mlx5's out_of_sequence.
    let error = has_word(&HW_ERROR_STEMS) || lower.contains("out_of_seq");
    if lower == "lifespan" || !error {
        return false;
    }
    let traffic = HW_TRAFFIC_SUFFIXES.iter().any(|s| lower.ends_with(s));
    !traffic || has_word(&HW_LOSS_STEMS)
}

/// A counter's value, or `None` for `N/A (no PMA)` and anything else that
/// is not a decimal integer.
pub fn parse_counter(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Whether a counter file of a port is an error counter worth watching:
/// `sub` is `counters` (the standard PMA counters, only the error ones) or
/// `hw_counters` (driver counters whose names say error, discard, drop,
/// link down, out-of-sequence, duplicate or retry).
pub fn is_error_counter(sub: &str, name: &str) -> bool {
    match sub {
        "counters" => PMA_ERROR_COUNTERS.contains(&name),
        "hw_counters" => is_hw_error_counter(name),
        _ => false,
    }
}

/// An error counter that went up between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterRise {
    /// Its key, e.g. `counters/symbol_error`.
    pub name: String,
    /// Value in the first snapshot.
    pub before: u64,
    /// Value in the second snapshot.
    pub after: u64,
}

/// The counters present in both snapshots whose value increased, in name
/// order. A counter that went down (reset) is not a rise.
pub fn rises(before: &CounterSnapshot, after: &CounterSnapshot) -> Vec<CounterRise> {
    before
        .counters
        .iter()
        .filter_map(|(name, &b)| {
            let &a = after.counters.get(name)?;
            (a > b).then(|| CounterRise {
                name: name.clone(),
                before: b,
                after: a,
            })
        })
        .collect()
}

/// The rate a link is expected to run at (`--expect-rate`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum ExpectRate {
    /// Whatever the port negotiated.
    #[default]
    Auto,
    /// This many Gb/s.
    Gbps(f64),
}

impl FromStr for ExpectRate {
    type Err = LinkError;

    /// `auto` (any case), or a positive, finite number of Gb/s such as
    /// `200`, `400` or `2.5`.
    fn from_str(s: &str) -> Result<Self, LinkError> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        match t.parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 && t.starts_with(|c: char| c.is_ascii_digit()) => {
                Ok(Self::Gbps(v))
            }
            _ => Err(LinkError::BadExpectRate {
                value: s.to_owned(),
            }),
        }
    }
}

impl fmt::Display for ExpectRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Gbps(v) => write!(f, "{v}"),
        }
    }
}

/// Parses `--min-efficiency`: a number greater than 0 and at most 1.
///
/// # Errors
/// [`LinkError::BadEfficiency`] naming the value.
pub fn parse_efficiency(s: &str) -> Result<f64, LinkError> {
    match s.trim().parse::<f64>() {
        Ok(v) if valid_efficiency(v) => Ok(v),
        _ => Err(LinkError::BadEfficiency {
            value: s.to_owned(),
        }),
    }
}

fn valid_efficiency(v: f64) -> bool {
    v > 0.0 && v <= 1.0
}

/// Everything the verdict depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct VerdictInput {
    /// The expected rate (`--expect-rate`).
    pub expect: ExpectRate,
    /// The negotiated rate, when it could be read.
    pub negotiated: Option<LinkRate>,
    /// Fraction of the expected traffic that must be reached, in (0, 1].
    pub min_efficiency: f64,
    /// Measured bandwidth in Gb/s (both directions added when
    /// bidirectional).
    pub measured_gbps: f64,
    /// 1, or 2 when bidirectional: the expected traffic is
    /// `directions × rate`. 0 counts as 1.
    pub directions: u32,
    /// Error counters that rose during the run.
    pub rises: Vec<CounterRise>,
}

/// Compares the measurement with the link: see the module documentation
/// and [`VerdictInput`]. Never panics; inputs out of range (an efficiency
/// outside (0, 1], a measurement that is not a finite non-negative number,
/// an explicit rate that is not positive) fail with a reason.
pub fn evaluate(input: &VerdictInput) -> Verdict {
    let directions = input.directions.max(1);
    let negotiated = input.negotiated.as_ref();
    let mut reasons = Vec::new();

    let expected = match input.expect {
        ExpectRate::Auto => match negotiated {
            Some(rate) => Some(rate.gbps),
            None => {
                reasons.push(
                    "expected rate unknown: the negotiated link rate could not be read \
                     (give --expect-rate <Gb/s>)"
                        .to_owned(),
                );
                None
            }
        },
        ExpectRate::Gbps(v) if v.is_finite() && v > 0.0 => Some(v),
        ExpectRate::Gbps(v) => {
            reasons.push(format!("expected rate {v} Gb/s is not a positive number"));
            None
        }
    };

    if let (ExpectRate::Gbps(_), Some(exp), Some(rate)) = (input.expect, expected, negotiated)
        && rate.gbps < exp
    {
        reasons.push(format!(
            "link trained down: negotiated {} < expected {exp} Gb/s",
            rate.describe()
        ));
    }

    let efficiency_ok = valid_efficiency(input.min_efficiency);
    if !efficiency_ok {
        reasons.push(format!(
            "min efficiency {} is outside (0, 1]",
            input.min_efficiency
        ));
    }

    let measured = input.measured_gbps;
    let measured_ok = measured.is_finite() && measured >= 0.0;
    if !measured_ok {
        reasons.push(format!(
            "measured bandwidth {measured} Gb/s is not a valid number"
        ));
    }

    let threshold = expected
        .filter(|_| efficiency_ok)
        .map(|exp| exp * input.min_efficiency * f64::from(directions));
    if let Some(t) = threshold
        && measured_ok
        && measured < t
    {
        // First, as the line leads with it.
        reasons.insert(0, below_threshold(measured, t));
    }

    for rise in &input.rises {
        reasons.push(format!(
            "error counter {} rose {} -> {}",
            rise.name, rise.before, rise.after
        ));
    }

    Verdict {
        pass: reasons.is_empty(),
        expected_gbps: expected,
        threshold_gbps: threshold,
        measured_gbps: measured,
        negotiated_gbps: negotiated.map(|r| r.gbps),
        negotiated_text: negotiated.map(|r| r.text.clone()),
        min_efficiency: input.min_efficiency,
        directions,
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn width_and_speed_codes_give_ibstat_rates() {
        assert_eq!(width_speed_gbps(2, 128), Some(400.0), "4X NDR");
        assert_eq!(width_speed_gbps(16, 64), Some(100.0), "2X HDR");
        assert_eq!(width_speed_gbps(1, 8), Some(10.0), "1X FDR10 (rxe)");
        assert_eq!(lane_speed(32), Some(("EDR", 25.0)));
        assert_eq!(lanes(3), None);
        assert_eq!(width_speed_gbps(2, 0), None);
    }

    fn rate(text: &str) -> LinkRate {
        parse_rate(text).unwrap()
    }

    fn input(expect: ExpectRate, negotiated: Option<&str>, measured: f64) -> VerdictInput {
        VerdictInput {
            expect,
            negotiated: negotiated.map(rate),
            min_efficiency: 0.9,
            measured_gbps: measured,
            directions: 1,
            rises: vec![],
        }
    }

    #[test]
    fn parses_every_rate_the_kernel_prints() {
        for (text, gbps) in [
            ("400 Gb/sec (4X NDR)\n", 400.0),
            ("200 Gb/sec (4X HDR)\n", 200.0),
            ("100 Gb/sec (2X HDR)\n", 100.0),
            ("200 Gb/sec (2X NDR)\n", 200.0),
            ("2.5 Gb/sec (1X SDR)\n", 2.5),
            ("10 Gb/sec (1X FDR10)\n", 10.0),
            ("56 Gb/sec (4X FDR)\n", 56.0),
            ("  25 Gb/sec (1X EDR)  ", 25.0),
            ("800 Gb/sec", 800.0),
        ] {
            let r = parse_rate(text).unwrap();
            assert_eq!(r.gbps, gbps, "{text:?}");
            assert_eq!(r.text, text.trim());
        }
    }

    #[test]
    fn rate_parse_errors_name_the_text() {
        for text in [
            "",
            "\n",
            "fast",
            "400",
            "400 Mb/sec",
            "0 Gb/sec (4X NDR)",
            "-1 Gb/sec",
            "NaN Gb/sec",
            "inf Gb/sec",
            "+5 Gb/sec",
            "four Gb/sec",
        ] {
            let e = parse_rate(text).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(&format!("{:?}", text.trim())), "{msg}");
            assert!(msg.starts_with("cannot parse link rate"), "{msg}");
        }
    }

    #[test]
    fn expect_rate_parses_auto_and_numbers() {
        assert_eq!("auto".parse::<ExpectRate>().unwrap(), ExpectRate::Auto);
        assert_eq!("AUTO".parse::<ExpectRate>().unwrap(), ExpectRate::Auto);
        assert_eq!(
            "200".parse::<ExpectRate>().unwrap(),
            ExpectRate::Gbps(200.0)
        );
        assert_eq!(
            "400".parse::<ExpectRate>().unwrap(),
            ExpectRate::Gbps(400.0)
        );
        assert_eq!("2.5".parse::<ExpectRate>().unwrap(), ExpectRate::Gbps(2.5));
        for bad in ["", "0", "-200", "nan", "inf", "fast", "200G", "1e999"] {
            let msg = bad.parse::<ExpectRate>().unwrap_err().to_string();
            assert!(msg.contains("--expect-rate"), "{msg}");
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
        }
        assert_eq!(ExpectRate::Auto.to_string(), "auto");
        assert_eq!(ExpectRate::Gbps(2.5).to_string(), "2.5");
    }

    #[test]
    fn efficiency_must_be_in_zero_one() {
        assert_eq!(parse_efficiency("0.9").unwrap(), 0.9);
        assert_eq!(parse_efficiency("1").unwrap(), 1.0);
        assert_eq!(parse_efficiency("0.01").unwrap(), 0.01);
        for bad in ["0", "-0.5", "1.01", "90", "nan", "inf", "", "ninety"] {
            let msg = parse_efficiency(bad).unwrap_err().to_string();
            assert!(msg.contains("--min-efficiency"), "{msg}");
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
        }
    }

    #[test]
    fn hw_counter_classification() {
        for name in [
            "duplicate_request",
            "out_of_seq_request",
            "rcvd_rnr_err",
            "send_rnr_err",
            "rcvd_seq_err",
            "retry_exceeded_err",
            "retry_rnr_exceeded_err",
            "completer_retry_err",
            "send_err",
            "link_downed",
            "req_transport_retries_exceeded",
            "rx_dropped_pkts",
            "req_cqe_error",
            "resp_remote_access_errors",
            "out_of_sequence",
            "port_xmit_discards",
        ] {
            assert!(is_hw_error_counter(name), "{name}");
        }
        for name in [
            "sent_pkts",
            "rcvd_pkts",
            "ack_deferred",
            "rdma_sends",
            "rdma_recvs",
            "lifespan",
            "retry_pkts",
            "out_of_buffer",
            "rx_icrc_encapsulated",
            "np_cnp_sent",
        ] {
            assert!(!is_hw_error_counter(name), "{name}");
        }
    }

    #[test]
    fn auto_expects_the_negotiated_rate() {
        let v = evaluate(&input(ExpectRate::Auto, Some("400 Gb/sec (4X NDR)"), 381.2));
        assert!(v.pass, "{v:?}");
        assert_eq!(v.expected_gbps, Some(400.0));
        assert_eq!(v.negotiated_gbps, Some(400.0));
        assert!((v.threshold_gbps.unwrap() - 360.0).abs() < 1e-9);
        assert_eq!(
            v.line(),
            "verdict: PASS measured 381.20 Gb/s >= threshold 360.00 Gb/s \
             (0.90 x 400 Gb/s expected; negotiated 400 Gb/sec (4X NDR))"
        );
    }

    #[test]
    fn below_threshold_fails_naming_both_numbers() {
        let v = evaluate(&input(ExpectRate::Auto, Some("400 Gb/sec (4X NDR)"), 300.0));
        assert!(!v.pass);
        assert_eq!(v.reasons, ["measured 300.00 Gb/s < threshold 360.00 Gb/s"]);
        assert_eq!(
            v.line(),
            "verdict: FAIL measured 300.00 Gb/s < threshold 360.00 Gb/s \
             (0.90 x 400 Gb/s expected; negotiated 400 Gb/sec (4X NDR))"
        );
    }

    #[test]
    fn trained_down_link_fails_even_above_its_own_rate() {
        let v = evaluate(&input(
            ExpectRate::Gbps(200.0),
            Some("100 Gb/sec (2X HDR)"),
            99.0,
        ));
        assert!(!v.pass);
        assert_eq!(v.expected_gbps, Some(200.0));
        assert!(
            v.reasons.contains(
                &"link trained down: negotiated 100 Gb/s (2X HDR) < expected 200 Gb/s".to_owned()
            ),
            "{:?}",
            v.reasons
        );
        // Even at full speed of the trained-down link and a lenient
        // efficiency, the trained-down reason alone fails it.
        let mut lenient = input(ExpectRate::Gbps(200.0), Some("100 Gb/sec (2X HDR)"), 100.0);
        lenient.min_efficiency = 0.5;
        let v = evaluate(&lenient);
        assert!(!v.pass);
        assert_eq!(
            v.reasons,
            ["link trained down: negotiated 100 Gb/s (2X HDR) < expected 200 Gb/s"]
        );
        assert_eq!(
            v.line(),
            "verdict: FAIL measured 100.00 Gb/s >= threshold 100.00 Gb/s \
             (0.50 x 200 Gb/s expected; negotiated 100 Gb/sec (2X HDR)); \
             link trained down: negotiated 100 Gb/s (2X HDR) < expected 200 Gb/s"
        );
    }

    #[test]
    fn explicit_rate_without_negotiated_rate_still_judges() {
        let v = evaluate(&input(ExpectRate::Gbps(200.0), None, 190.0));
        assert!(v.pass, "{v:?}");
        assert!(v.line().contains("negotiated rate unknown"), "{}", v.line());
        // A faster link than expected is not a failure.
        let v = evaluate(&input(
            ExpectRate::Gbps(200.0),
            Some("400 Gb/sec (4X NDR)"),
            190.0,
        ));
        assert!(v.pass, "{v:?}");
    }

    #[test]
    fn unknown_rate_with_auto_fails() {
        let v = evaluate(&input(ExpectRate::Auto, None, 381.0));
        assert!(!v.pass);
        assert_eq!(v.expected_gbps, None);
        assert_eq!(v.threshold_gbps, None);
        assert_eq!(v.reasons.len(), 1);
        assert!(
            v.reasons[0].contains("expected rate unknown"),
            "{:?}",
            v.reasons
        );
        assert!(v.reasons[0].contains("--expect-rate"), "{:?}", v.reasons);
        assert!(
            v.line()
                .starts_with("verdict: FAIL measured 381.00 Gb/s, no threshold"),
            "{}",
            v.line()
        );
    }

    #[test]
    fn bidirectional_doubles_the_threshold() {
        let mut i = input(ExpectRate::Auto, Some("200 Gb/sec (4X HDR)"), 300.0);
        i.directions = 2;
        let v = evaluate(&i);
        assert!(!v.pass);
        assert!((v.threshold_gbps.unwrap() - 360.0).abs() < 1e-9);
        assert!(
            v.line().contains("(0.90 x 2 x 200 Gb/s expected;"),
            "{}",
            v.line()
        );
        i.measured_gbps = 370.0;
        assert!(evaluate(&i).pass);
        // Unidirectional, the same 300 passes.
        i.directions = 1;
        i.measured_gbps = 300.0;
        assert!(evaluate(&i).pass);
        // 0 directions counts as 1.
        i.directions = 0;
        assert_eq!(evaluate(&i).directions, 1);
    }

    #[test]
    fn counter_rises_fail_naming_counter_and_values() {
        let mut i = input(ExpectRate::Auto, Some("400 Gb/sec (4X NDR)"), 381.2);
        i.rises = vec![CounterRise {
            name: "counters/symbol_error".into(),
            before: 0,
            after: 12,
        }];
        let v = evaluate(&i);
        assert!(!v.pass);
        assert_eq!(
            v.reasons,
            ["error counter counters/symbol_error rose 0 -> 12"]
        );
        assert!(
            v.line()
                .ends_with("; error counter counters/symbol_error rose 0 -> 12"),
            "{}",
            v.line()
        );
    }

    #[test]
    fn nonsense_inputs_fail_without_panicking() {
        for (eff, measured, expect) in [
            (0.0, 100.0, ExpectRate::Auto),
            (1.5, 100.0, ExpectRate::Auto),
            (f64::NAN, 100.0, ExpectRate::Auto),
            (0.9, f64::NAN, ExpectRate::Auto),
            (0.9, -1.0, ExpectRate::Auto),
            (0.9, f64::INFINITY, ExpectRate::Auto),
            (0.9, 100.0, ExpectRate::Gbps(0.0)),
            (0.9, 100.0, ExpectRate::Gbps(f64::NAN)),
        ] {
            let mut i = input(expect, Some("100 Gb/sec (4X EDR)"), measured);
            i.min_efficiency = eff;
            let v = evaluate(&i);
            assert!(!v.pass, "{eff} {measured} {expect:?}");
            assert!(!v.line().is_empty());
        }
    }

    #[test]
    fn rises_only_counts_increases_present_in_both() {
        let snap = |pairs: &[(&str, u64)]| CounterSnapshot {
            counters: pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect(),
        };
        let before = snap(&[("a", 1), ("b", 5), ("c", 0), ("gone", 0)]);
        let after = snap(&[("a", 1), ("b", 2), ("c", 3), ("new", 9)]);
        assert_eq!(
            rises(&before, &after),
            [CounterRise {
                name: "c".into(),
                before: 0,
                after: 3
            }]
        );
    }
}
