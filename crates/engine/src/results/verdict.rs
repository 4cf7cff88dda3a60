//! The verdicts of a run: the link's (`--expect-rate`, judged by
//! [`crate::fabric::link::evaluate`]), a latency threshold's
//! (`--max-latency`, [`crate::results::lat::LatVerdict`]) and perftest's
//! limits (`-w/--limit_bw`, `-y/--limit_msgrate`), and the exit code of a
//! run one of them fails.

use serde::Serialize;

use crate::results::lat::LatVerdict;

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
            _ => EXIT_VERDICT_FAIL,
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

/// perftest's `-w/--limit_bw` and `-y/--limit_msgrate`: the best average
/// over the sizes must reach them (perftest passes a run when any one
/// report does).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// `-w`, in the table's unit.
    pub bw: Option<f64>,
    /// `-y`, Mpps.
    pub msg_rate: Option<f64>,
    best_bw: f64,
    best_msg_rate: f64,
}

impl Limits {
    /// Limits `bw` (in the table's unit) and `msg_rate` (Mpps).
    pub fn new(bw: Option<f64>, msg_rate: Option<f64>) -> Self {
        Self {
            bw,
            msg_rate,
            ..Self::default()
        }
    }

    /// Takes one size's average bandwidth (the table's unit) and message
    /// rate.
    pub fn observe(&mut self, bw: f64, msg_rate: f64) {
        self.best_bw = self.best_bw.max(bw);
        self.best_msg_rate = self.best_msg_rate.max(msg_rate);
    }

    /// The verdict of each limit given, against the best size; `unit` is
    /// the bandwidth's as the table heads it (`MiB/sec`, `Gb/sec`).
    pub fn verdicts(&self, unit: &'static str) -> Vec<VerdictRecord> {
        let bw = self.bw.map(|limit| {
            LimitVerdict::new("--limit_bw", "average bandwidth", unit, self.best_bw, limit)
        });
        let rate = self.msg_rate.map(|limit| {
            LimitVerdict::new(
                "--limit_msgrate",
                "message rate",
                "Mpps",
                self.best_msg_rate,
                limit,
            )
        });
        bw.into_iter()
            .chain(rate)
            .map(VerdictRecord::Limit)
            .collect()
    }
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

/// The outcome of a link validation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// Whether every check passed.
    pub pass: bool,
    /// The expected rate of one direction in Gb/s, when known.
    pub expected_gbps: Option<f64>,
    /// The bandwidth to reach (`expected × min_efficiency × directions`),
    /// when known.
    pub threshold_gbps: Option<f64>,
    /// The measured bandwidth in Gb/s.
    pub measured_gbps: f64,
    /// The negotiated rate in Gb/s, when known.
    pub negotiated_gbps: Option<f64>,
    /// The negotiated rate as the kernel prints it, when known.
    pub negotiated_text: Option<String>,
    /// The efficiency asked for.
    pub min_efficiency: f64,
    /// 1, or 2 when bidirectional.
    pub directions: u32,
    /// Why it failed, one reason per failed check (empty on a pass).
    pub reasons: Vec<String>,
}

/// The reason for a measurement below its threshold.
pub(crate) fn below_threshold(measured: f64, threshold: f64) -> String {
    format!("measured {measured:.2} Gb/s < threshold {threshold:.2} Gb/s")
}

/// `x` with two decimals, or more when two would round it.
fn num(x: f64) -> String {
    let two = format!("{x:.2}");
    if two.parse::<f64>() == Ok(x) {
        two
    } else {
        format!("{x}")
    }
}

impl Verdict {
    /// The verdict on one line: the comparison with its context, then
    /// every other reason, e.g.
    /// `verdict: PASS measured 381.20 Gb/s >= threshold 360.00 Gb/s (0.90 x 400 Gb/s expected; negotiated 400 Gb/sec (4X NDR))`.
    pub fn line(&self) -> String {
        let status = if self.pass { "PASS" } else { "FAIL" };
        let negotiated = match &self.negotiated_text {
            Some(text) => format!("negotiated {text}"),
            None => "negotiated rate unknown".to_owned(),
        };
        let measured = self.measured_gbps;
        let mut line = match (self.threshold_gbps, self.expected_gbps) {
            (Some(t), Some(exp)) => {
                let op = if measured >= t { ">=" } else { "<" };
                let dirs = if self.directions > 1 {
                    format!("{} x ", self.directions)
                } else {
                    String::new()
                };
                format!(
                    "verdict: {status} measured {measured:.2} Gb/s {op} threshold {t:.2} Gb/s \
                     ({} x {dirs}{exp} Gb/s expected; {negotiated})",
                    num(self.min_efficiency)
                )
            }
            _ => format!(
                "verdict: {status} measured {measured:.2} Gb/s, no threshold ({negotiated})"
            ),
        };
        let lead = self.threshold_gbps.map(|t| below_threshold(measured, t));
        for reason in &self.reasons {
            if Some(reason) != lead.as_ref() {
                line.push_str("; ");
                line.push_str(reason);
            }
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_judge_the_best_size_as_perftest_and_say_its_error() {
        let mut l = Limits::new(Some(1000.0), Some(2.0));
        l.observe(800.0, 2.5);
        l.observe(1200.0, 1.0);
        let v = l.verdicts("MiB/sec");
        assert_eq!(v.len(), 2);
        // The best bandwidth (1200) passes -w 1000; the best rate (2.5)
        // passes -y 2.
        assert!(v.iter().all(VerdictRecord::pass), "{v:?}");
        let mut l = Limits::new(Some(1000.0), None);
        l.observe(999.0, 9.0);
        let v = l.verdicts("Gb/sec");
        assert_eq!(v.len(), 1);
        let VerdictRecord::Limit(lv) = &v[0] else {
            panic!("{v:?}")
        };
        assert!(!lv.pass);
        assert_eq!(lv.perftest_error(), "Error: BW result is below bw limit");
        assert_eq!(lv.unit, "Gb/sec");
        assert!(Limits::new(None, None).verdicts("MiB/sec").is_empty());
    }
}
