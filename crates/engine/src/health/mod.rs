//! `rdmaperf health`: the node check a scheduler runs (Slurm's
//! `HealthCheckProgram` and `Prolog`, a Kubernetes node-problem-detector
//! plugin, an NHC check), as pure rules: what each check found
//! ([`Check`]), the node's one verdict ([`Status`], [`HealthReport`]) and
//! how the schedulers want it said (text, NHC's one line, NPD's message
//! and exit code). The binary reads sysfs, keeps the state file and runs
//! the active test; nothing here reads a file or a clock.
//!
//! - [`counters`]: port counter snapshots, link flaps between two of them
//!   and error counts over the last hour (reboots, driver reloads,
//!   saturated and missing counters, clock steps).
//! - [`state`]: what survives between runs (snapshots, flap events, each
//!   rail's past active figures, the last verdict), bounded.
//! - [`passive`]: the checks of one run from the ports and the state.
//! - [`drain`]: whether to drain or resume the Slurm node, and never an
//!   operator's drain.
//!
//! The rules and their sources are in docs/health.md.

pub mod counters;
pub mod drain;
pub mod passive;
pub mod state;

use std::fmt;

use serde::{Deserialize, Serialize};

/// Exit code of a FAIL verdict (the project's "a check found a FAIL").
pub const EXIT_FAIL: u8 = crate::results::verdict::EXIT_VERDICT_FAIL;
/// Exit code of an UNKNOWN verdict: a check could not finish (over its
/// budget, a device that would not open). Not 3, so that a wrapper that
/// drains on 3 never drains a node for a broken check (aznhc's NHCNA).
pub const EXIT_UNKNOWN: u8 = 5;
/// Most characters of a Slurm drain reason / NHC line we write: short
/// enough for `sinfo -R`'s column and Slurm's reason field.
pub const REASON_MAX_CHARS: usize = 120;
/// Most characters of a node-problem-detector message: NPD's custom
/// plugin cuts the output at `max_output_length`, 80 by default
/// (kubernetes/node-problem-detector, docs/custom_plugin_monitor.md).
pub const NPD_MAX_CHARS: usize = 80;
/// The prefix of every reason we write; a drain whose reason starts
/// otherwise is an operator's and is never resumed (LBNL NHC's `NHC:`
/// convention, mej/nhc helpers/node-mark-online).
pub const REASON_PREFIX: &str = "rdmaperf:";

/// One check's outcome, worst last: the node's verdict is the worst of
/// its checks, except that a FAIL outranks an UNKNOWN (a port that is
/// down is down even if the active test could not finish).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// The check passed.
    Pass,
    /// Worth a look, not a reason to take the node: one flap, an error
    /// counter that rose, a baseline still building.
    Warn,
    /// The check could not finish: no verdict (never drains).
    Unknown,
    /// The node should not get a job.
    Fail,
}

impl Status {
    /// `PASS`, `WARN`, `UNKNOWN`, `FAIL`.
    pub fn word(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Warn => "WARN",
            Self::Unknown => "UNKNOWN",
            Self::Fail => "FAIL",
        }
    }

    /// The process exit code: 0 PASS and WARN, [`EXIT_FAIL`],
    /// [`EXIT_UNKNOWN`].
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Pass | Self::Warn => 0,
            Self::Unknown => EXIT_UNKNOWN,
            Self::Fail => EXIT_FAIL,
        }
    }

    /// node-problem-detector's custom plugin code: 0 OK, 1 a problem, 2
    /// unknown.
    pub fn npd_exit_code(self) -> u8 {
        match self {
            Self::Pass | Self::Warn => 0,
            Self::Fail => 1,
            Self::Unknown => 2,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// What one check found about one thing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// The check: `port`, `rails`, `rate`, `flap`, `symbol_error`,
    /// `link_error_recovery`, `counters`, `active`, `baseline`, `state`.
    pub check: String,
    /// What it is about: a port `rxe1/1`, a direction `rxe1 -> rxe0`;
    /// `None` for the node.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub subject: Option<String>,
    /// Its outcome.
    pub status: Status,
    /// What was found, in words.
    pub message: String,
}

impl Check {
    /// A check's outcome.
    pub fn new(
        check: &str,
        subject: Option<String>,
        status: Status,
        message: impl Into<String>,
    ) -> Self {
        Self {
            check: check.to_owned(),
            subject,
            status,
            message: message.into(),
        }
    }

    /// `FAIL flap rxe1/1: 5 link flaps in the last 24h (fail at 5)`.
    pub fn line(&self) -> String {
        match &self.subject {
            Some(s) => format!("{} {} {s}: {}", self.status, self.check, self.message),
            None => format!("{} {}: {}", self.status, self.check, self.message),
        }
    }

    /// `flap: rxe1/1 5 link flaps in the last 24h (fail at 5)`: the
    /// check and what it found, for a reason.
    fn reason_body(&self) -> String {
        match &self.subject {
            Some(s) => format!("{}: {s} {}", self.check, self.message),
            None => format!("{}: {}", self.check, self.message),
        }
    }
}

/// The node's verdict with every check and note: what `--json` prints and
/// the state file keeps as the last verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthReport {
    /// The node (Slurm's name or the short host name).
    pub node: String,
    /// When it was judged, Unix seconds.
    pub time_s: i64,
    /// The verdict: the worst check (FAIL over UNKNOWN).
    pub verdict: Status,
    /// Whether the active test ran.
    pub active: bool,
    /// Every check, worst first (stable within a status).
    pub checks: Vec<Check>,
    /// What the run noticed that is no check's outcome (a state file set
    /// aside, a reboot since the last run).
    pub notes: Vec<String>,
    /// How long the check took, seconds.
    pub seconds: f64,
    /// Each rail's figures (flaps in the window, error counts), for the
    /// exporter.
    #[serde(default)]
    pub rails: Vec<RailFigures>,
    /// Each active direction's figure against its baseline.
    #[serde(default)]
    pub directions: Vec<DirectionFigures>,
}

/// One rail's figures of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RailFigures {
    /// The device.
    pub device: String,
    /// The port.
    pub port: u8,
    /// Link flaps in the window.
    pub flaps: u64,
    /// The window, seconds.
    pub flap_window_s: u64,
    /// `symbol_error`'s rise over the last hour (or the shorter span the
    /// state covers), when known.
    pub symbol_errors: Option<u64>,
    /// `link_error_recovery`'s, likewise.
    pub link_error_recoveries: Option<u64>,
}

/// One active direction's figures of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectionFigures {
    /// Sending rail, `rxe0/1`.
    pub from: String,
    /// Receiving rail.
    pub to: String,
    /// Its bandwidth, Gb/s.
    pub gbps: f64,
    /// Its baseline, Gb/s, once there is one.
    pub baseline_gbps: Option<f64>,
}

impl HealthReport {
    /// The report of `checks` (sorted worst first, the verdict taken).
    pub fn new(node: &str, time_s: i64, active: bool, mut checks: Vec<Check>) -> Self {
        checks.sort_by_key(|c| std::cmp::Reverse(c.status));
        Self {
            node: node.to_owned(),
            time_s,
            verdict: verdict_of(&checks),
            active,
            checks,
            notes: Vec::new(),
            seconds: 0.0,
            rails: Vec::new(),
            directions: Vec::new(),
        }
    }

    /// `health: FAIL on node7: 1 check failed, 2 warned, 9 passed (0.02 s)`.
    pub fn headline(&self) -> String {
        let count = |s: Status| self.checks.iter().filter(|c| c.status == s).count();
        let mut parts = Vec::new();
        for (status, word) in [
            (Status::Fail, "failed"),
            (Status::Unknown, "unknown"),
            (Status::Warn, "warned"),
            (Status::Pass, "passed"),
        ] {
            let n = count(status);
            if n > 0 {
                parts.push(format!("{n} {word}"));
            }
        }
        format!(
            "health: {} on {}: {} ({}{:.2} s)",
            self.verdict,
            self.node,
            if parts.is_empty() {
                "no checks".to_owned()
            } else {
                parts.join(", ")
            },
            if self.active { "active, " } else { "passive, " },
            self.seconds
        )
    }

    /// The text report: the headline, one line per check (worst first),
    /// a line per note.
    pub fn text(&self) -> String {
        let mut out = self.headline();
        out.push('\n');
        for c in &self.checks {
            out.push_str(&c.line());
            out.push('\n');
        }
        for n in &self.notes {
            out.push_str("note: ");
            out.push_str(n);
            out.push('\n');
        }
        out
    }

    /// The reason a FAIL (or UNKNOWN) gives in one line,
    /// `rdmaperf: <check>: <message>`, cut to [`REASON_MAX_CHARS`]: the
    /// first check of the verdict's status, and how many more there are.
    /// `None` when the verdict is PASS or WARN.
    pub fn reason(&self) -> Option<String> {
        if matches!(self.verdict, Status::Pass | Status::Warn) {
            return None;
        }
        let mut same = self.checks.iter().filter(|c| c.status == self.verdict);
        let first = same.next()?;
        let more = same.count();
        let tail = if more > 0 {
            format!(" (+{more} more)")
        } else {
            String::new()
        };
        Some(one_line(
            &format!("{REASON_PREFIX} {}", first.reason_body()),
            &tail,
            REASON_MAX_CHARS,
        ))
    }

    /// What `--format nhc` prints: the reason line on FAIL or UNKNOWN
    /// (UNKNOWN's check is named `unknown:` first, so that a wrapper
    /// that drains on any line can tell), nothing on PASS or WARN.
    pub fn nhc_line(&self) -> Option<String> {
        let reason = self.reason()?;
        Some(match self.verdict {
            Status::Unknown => one_line(
                &format!(
                    "{REASON_PREFIX} unknown: {}",
                    reason.trim_start_matches(REASON_PREFIX).trim_start()
                ),
                "",
                REASON_MAX_CHARS,
            ),
            _ => reason,
        })
    }

    /// node-problem-detector's message (at most [`NPD_MAX_CHARS`]): the
    /// reason on FAIL/UNKNOWN, `rdmaperf: PASS` (with the warning count)
    /// otherwise.
    pub fn npd_message(&self) -> String {
        match self.nhc_line() {
            Some(line) => one_line(&line, "", NPD_MAX_CHARS),
            None => {
                let warned = self
                    .checks
                    .iter()
                    .filter(|c| c.status == Status::Warn)
                    .count();
                if warned == 0 {
                    format!("{REASON_PREFIX} PASS")
                } else {
                    format!("{REASON_PREFIX} PASS with {warned} warning(s)")
                }
            }
        }
    }
}

/// The verdict of some checks: FAIL if any failed, else UNKNOWN if any
/// could not finish, else WARN if any warned, else PASS (no checks:
/// UNKNOWN, nothing was judged).
pub fn verdict_of(checks: &[Check]) -> Status {
    checks
        .iter()
        .map(|c| c.status)
        .max()
        .unwrap_or(Status::Unknown)
}

/// `text` + `tail` on one line (newlines and tabs become spaces, double
/// quotes single ones), cut to `max` characters with `…` when longer; the
/// tail is kept whole when it fits.
pub fn one_line(text: &str, tail: &str, max: usize) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| match c {
                '\n' | '\r' | '\t' => ' ',
                '"' => '\'',
                c if c.is_control() => ' ',
                c => c,
            })
            .collect()
    };
    let (text, tail) = (clean(text), clean(tail));
    let total = text.chars().count() + tail.chars().count();
    if total <= max {
        return format!("{text}{tail}");
    }
    let tail_len = tail.chars().count();
    let room = max.saturating_sub(tail_len + 1);
    if room == 0 {
        let cut: String = text.chars().take(max.saturating_sub(1)).collect();
        return format!("{cut}…");
    }
    let cut: String = text.chars().take(room).collect();
    format!("{}…{tail}", cut.trim_end())
}

/// A duration for a reason or a flag: `24h`, `90m`, `45s`, `3d` (hours
/// up to two days).
pub fn describe_seconds(s: u64) -> String {
    if s > 172_800 && s.is_multiple_of(86_400) {
        format!("{}d", s / 86_400)
    } else if s > 0 && s.is_multiple_of(3_600) {
        format!("{}h", s / 3_600)
    } else if s > 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// Parses a duration flag: a positive whole number with an optional unit
/// `s`, `m`, `h` or `d` (seconds without one), at most 366 days.
///
/// # Errors
/// Says what was expected.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a duration: want e.g. 24h, 90m, 3600 or 2d");
    let (number, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, "s"),
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let s = n.checked_mul(scale).ok_or_else(bad)?;
    if s == 0 || s > 366 * 86_400 {
        return Err(format!("{text:?}: want a duration from 1s to 366d"));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, subject: &str, status: Status, message: &str) -> Check {
        Check::new(name, Some(subject.to_owned()), status, message)
    }

    #[test]
    fn the_verdict_is_the_worst_check_and_a_fail_outranks_an_unknown() {
        let pass = check("port", "rxe0/1", Status::Pass, "ACTIVE");
        let warn = check("flap", "rxe0/1", Status::Warn, "1 link flap");
        let unknown = check("active", "rxe0", Status::Unknown, "over budget");
        let fail = check("port", "rxe1/1", Status::Fail, "state DOWN");
        assert_eq!(verdict_of(std::slice::from_ref(&pass)), Status::Pass);
        assert_eq!(verdict_of(&[pass.clone(), warn.clone()]), Status::Warn);
        assert_eq!(
            verdict_of(&[warn.clone(), unknown.clone()]),
            Status::Unknown
        );
        assert_eq!(verdict_of(&[unknown, fail, warn]), Status::Fail);
        assert_eq!(verdict_of(&[]), Status::Unknown);
        assert_eq!(Status::Warn.exit_code(), 0);
        assert_eq!(Status::Fail.exit_code(), 3);
        assert_eq!(Status::Unknown.exit_code(), 5);
        assert_eq!(Status::Fail.npd_exit_code(), 1);
        assert_eq!(Status::Unknown.npd_exit_code(), 2);
    }

    #[test]
    fn the_nhc_line_names_the_first_failed_check_and_how_many_more_within_120_chars() {
        let r = HealthReport::new(
            "node7",
            0,
            false,
            vec![
                check("port", "rxe0/1", Status::Pass, "ACTIVE LinkUp"),
                check(
                    "flap",
                    "rxe1/1",
                    Status::Fail,
                    "5 link flaps in the last 24h (fail at 5)",
                ),
                check("rate", "rxe2/1", Status::Fail, "100 Gb/s below 400 Gb/s"),
            ],
        );
        assert_eq!(r.verdict, Status::Fail);
        assert_eq!(
            r.nhc_line().unwrap(),
            "rdmaperf: flap: rxe1/1 5 link flaps in the last 24h (fail at 5) (+1 more)"
        );
        assert_eq!(r.reason(), r.nhc_line());
        let long = HealthReport::new(
            "n",
            0,
            false,
            vec![check(
                "port",
                "mlx5_0/1",
                Status::Fail,
                &"x\"y\n".repeat(100),
            )],
        );
        let line = long.nhc_line().unwrap();
        assert_eq!(line.chars().count(), REASON_MAX_CHARS);
        assert!(
            line.starts_with("rdmaperf: port: mlx5_0/1 x'y x'y"),
            "{line}"
        );
        assert!(!line.contains('\n') && !line.contains('"'));
        assert!(line.ends_with('…'));
        let npd = long.npd_message();
        assert_eq!(npd.chars().count(), NPD_MAX_CHARS);
    }

    #[test]
    fn pass_and_warn_print_no_nhc_line_and_an_npd_ok_message() {
        let pass = HealthReport::new(
            "n",
            0,
            false,
            vec![check("port", "rxe0/1", Status::Pass, "ACTIVE")],
        );
        assert_eq!(pass.nhc_line(), None);
        assert_eq!(pass.npd_message(), "rdmaperf: PASS");
        let warn = HealthReport::new(
            "n",
            0,
            false,
            vec![check("flap", "rxe0/1", Status::Warn, "1 link flap")],
        );
        assert_eq!(warn.verdict.exit_code(), 0);
        assert_eq!(warn.nhc_line(), None);
        assert_eq!(warn.npd_message(), "rdmaperf: PASS with 1 warning(s)");
        let unknown = HealthReport::new(
            "n",
            0,
            true,
            vec![check(
                "active",
                "rails",
                Status::Unknown,
                "did not finish within --budget 10s",
            )],
        );
        assert_eq!(
            unknown.nhc_line().unwrap(),
            "rdmaperf: unknown: active: rails did not finish within --budget 10s"
        );
    }

    #[test]
    fn the_text_report_puts_the_worst_first() {
        let r = HealthReport::new(
            "node7",
            0,
            false,
            vec![
                check("port", "rxe0/1", Status::Pass, "ACTIVE LinkUp"),
                check("flap", "rxe1/1", Status::Warn, "1 link flap"),
            ],
        );
        let text = r.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "health: WARN on node7: 1 warned, 1 passed (passive, 0.00 s)"
        );
        assert_eq!(lines[1], "WARN flap rxe1/1: 1 link flap");
        assert_eq!(lines[2], "PASS port rxe0/1: ACTIVE LinkUp");
    }

    #[test]
    fn durations_take_units_and_refuse_nonsense() {
        assert_eq!(parse_duration("24h"), Ok(86_400));
        assert_eq!(parse_duration("90m"), Ok(5_400));
        assert_eq!(parse_duration("3600"), Ok(3_600));
        assert_eq!(parse_duration("2d"), Ok(172_800));
        for bad in ["", "0", "h", "1w", "-1h", "1.5h", "400d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(describe_seconds(86_400), "24h");
        assert_eq!(describe_seconds(259_200), "3d");
        assert_eq!(describe_seconds(21_600), "6h");
        assert_eq!(describe_seconds(90), "90s");
    }
}
