//! The pure core of `rdmaperf doctor nccl`: a block of `NCCL_*`
//! variables checked against this machine with NCCL's own semantics, and
//! NCCL's `NCCL_DEBUG=INFO` logs read for the transport each process
//! ended up on.
//!
//! One wrong value (an `NCCL_IB_HCA` prefix naming no device, a GID index
//! absent from the port) does not stop NCCL: it silently falls back to
//! TCP sockets. Every check here says what NCCL does with the value, on
//! this machine, and what to set instead.
//!
//! The semantics follow NCCL's source: `src/misc/utils.cc`
//! (`parseStringList`, `matchIfList`: the `^`/`=`/prefix lists of
//! `NCCL_IB_HCA` and `NCCL_SOCKET_IFNAME`), `src/transport/net_ib.cc`
//! (only ACTIVE IB/Ethernet ports are used; the GID index), and
//! `src/misc/socket.cc` (interface selection), and NCCL's `env.rst`.
//!
//! - [`env`](mod@env): the block of variables ([`env::EnvBlock`]) and the machine
//!   ([`env::Machine`]) it is checked against, [`env::check`].
//! - [`log`]: NCCL's logs, [`log::read_log`].
//! - here: what both say, [`Finding`]s of a [`Severity`], and the
//!   [`Report`] `doctor nccl` shows.

use std::fmt;

use serde::Serialize;

pub mod env;
pub mod log;

use crate::nccl::log::LogReport;

// --- findings ----------------------------------------------------------------

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing wrong.
    Note,
    /// Probably not what was meant, or slower/fragile; NCCL still works.
    Warning,
    /// NCCL fails, or silently falls back to sockets.
    Error,
}

impl Severity {
    /// `error`, `warning` or `note`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One thing the doctor says about a variable or a log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// The variable (`NCCL_IB_HCA`), or for log findings `log` or the
    /// process (`host:pid`).
    pub variable: String,
    /// The variable's value as set, when the finding is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// What is wrong, or what the value means here.
    pub message: String,
    /// What to set instead (`NCCL_IB_HCA=rxe0`), or what to do.
    pub fix: Option<String>,
}

impl Finding {
    /// A finding without a value or a fix.
    pub fn new(
        severity: Severity,
        variable: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            severity,
            variable: variable.into(),
            value: None,
            message: message.into(),
            fix: None,
        }
    }

    /// The same, about the value `value`.
    pub fn with_value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// The same, with a fix.
    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// The same, with `fix` as its fix.
    fn with_fix_opt(mut self, fix: Option<String>) -> Self {
        self.fix = fix;
        self
    }

    /// One line of text: `error   NCCL_IB_HCA=mlx5: <message> — fix: <fix>`.
    pub fn line(&self) -> String {
        let mut s = format!("{:<7} {}", self.severity, self.variable);
        if let Some(v) = &self.value {
            s.push('=');
            s.push_str(v);
        }
        s.push_str(": ");
        s.push_str(&self.message);
        if let Some(fix) = &self.fix {
            s.push_str(" — fix: ");
            s.push_str(fix);
        }
        s
    }
}

/// Counts of findings by severity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Errors.
    pub errors: usize,
    /// Warnings.
    pub warnings: usize,
    /// Notes.
    pub notes: usize,
}

impl Summary {
    /// Counts `findings`.
    pub fn of(findings: &[Finding]) -> Self {
        let mut s = Summary::default();
        for f in findings {
            match f.severity {
                Severity::Error => s.errors += 1,
                Severity::Warning => s.warnings += 1,
                Severity::Note => s.notes += 1,
            }
        }
        s
    }
}

/// Whether any finding is an error.
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}

/// The JSON document of `rdmaperf doctor nccl --json`:
/// `{"schema_version":1,"kind":"doctor_nccl","findings":[...],"log":...}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `1`.
    pub schema_version: u32,
    /// `doctor_nccl`.
    pub kind: &'static str,
    /// Counts by severity.
    pub summary: Summary,
    /// The findings about the variables, then about the log.
    pub findings: Vec<Finding>,
    /// What the log said, when one was read.
    pub log: Option<LogReport>,
}

impl Report {
    /// The report of `findings` (variables then log) and the log read.
    pub fn new(findings: Vec<Finding>, log: Option<LogReport>) -> Self {
        Report {
            schema_version: 1,
            kind: "doctor_nccl",
            summary: Summary::of(&findings),
            findings,
            log,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::log::read_log;

    // --- findings and the report ------------------------------------------------------------------

    #[test]
    fn finding_lines_and_json() {
        let f = Finding::new(
            Severity::Error,
            "NCCL_IB_HCA",
            "matches no RDMA device here",
        )
        .with_value("mlx5")
        .with_fix("NCCL_IB_HCA=rxe0");
        assert_eq!(
            f.line(),
            "error   NCCL_IB_HCA=mlx5: matches no RDMA device here — fix: NCCL_IB_HCA=rxe0"
        );
        let w = Finding::new(Severity::Warning, "log", "x");
        assert_eq!(w.line(), "warning log: x");
        assert_eq!(
            Finding::new(Severity::Note, "v", "y").line(),
            "note    v: y"
        );
        let j = serde_json::to_value(&f).unwrap();
        assert_eq!(j["severity"], "error");
        assert_eq!(j["variable"], "NCCL_IB_HCA");
        assert_eq!(j["fix"], "NCCL_IB_HCA=rxe0");
        assert_eq!(serde_json::to_value(Severity::Warning).unwrap(), "warning");
        assert_eq!(serde_json::to_value(Severity::Note).unwrap(), "note");
        let r = Report::new(vec![f], Some(read_log("")));
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["schema_version"], 1);
        assert_eq!(j["kind"], "doctor_nccl");
        assert_eq!(j["findings"].as_array().unwrap().len(), 1);
        assert_eq!(j["summary"]["errors"], 1);
        assert!(j["log"].is_object());
    }
}
