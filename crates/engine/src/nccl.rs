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

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use crate::ports::{DeviceState, GidEntry, PortState};

// --- the machine -------------------------------------------------------------

/// A network interface (`getifaddrs`/`/sys/class/net`), as the socket
/// checks need it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetInterface {
    /// Its name (`eth0`).
    pub name: String,
    /// Whether it is administratively and operationally up.
    pub up: bool,
    /// Its IPv4 and IPv6 addresses.
    pub addresses: Vec<IpAddr>,
}

/// What the machine has for GPUDirect RDMA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GpuState {
    /// NVIDIA GPUs found (0 when none, or no driver).
    pub gpus: u32,
    /// The loaded peer-memory module (`nvidia_peermem`, `nv_peer_mem`),
    /// if any.
    pub peer_memory_module: Option<String>,
}

/// This machine, as the NCCL checks see it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Machine {
    /// Its RDMA devices with their ports and GID tables.
    pub devices: Vec<DeviceState>,
    /// Its network interfaces.
    pub interfaces: Vec<NetInterface>,
    /// Its GPUs.
    pub gpus: GpuState,
}

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
    pub fn new(severity: Severity, variable: impl Into<String>, message: impl Into<String>) -> Self {
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

// --- the block of variables ------------------------------------------------------

/// A line of an env block that is not `NAME=value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvParseError {
    /// Not an assignment at all.
    #[error("line {line}: {text:?} is not NAME=value")]
    NotAssignment {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
    /// A quoted value whose quote is not closed at the end of the line.
    #[error("line {line}: {text:?} has an unterminated quote")]
    UnterminatedQuote {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
    /// An unquoted value with a space in it (the shell would run the rest
    /// as a command).
    #[error("line {line}: {text:?} has an unquoted space in its value")]
    UnquotedSpace {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
}

/// One `NAME=value` of a block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvVar {
    /// The name.
    pub name: String,
    /// The value, quotes removed.
    pub value: String,
    /// Its 1-based line in the parsed text (`None` from the environment).
    pub line: Option<usize>,
}

/// A block of variables, in the order set (every assignment kept: a name
/// set twice is there twice, and the last wins, as in the shell).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EnvBlock {
    vars: Vec<EnvVar>,
}

impl EnvBlock {
    /// Parses `export NAME=value` / `NAME=value` lines (values optionally
    /// in `"..."` or `'...'`), `#` comments and blank lines.
    pub fn parse(text: &str) -> Result<EnvBlock, EnvParseError> {
        let mut vars = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let t = raw.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let not = || EnvParseError::NotAssignment {
                line,
                text: t.to_owned(),
            };
            let body = match t.strip_prefix("export") {
                Some(rest) if rest.starts_with([' ', '\t']) => rest.trim_start(),
                _ => t,
            };
            let (name, value) = body.split_once('=').ok_or_else(not)?;
            if !is_env_name(name) {
                return Err(not());
            }
            let value = unquote(value).map_err(|e| match e {
                Unquote::Unterminated => EnvParseError::UnterminatedQuote {
                    line,
                    text: t.to_owned(),
                },
                Unquote::Space => EnvParseError::UnquotedSpace {
                    line,
                    text: t.to_owned(),
                },
            })?;
            vars.push(EnvVar {
                name: name.to_owned(),
                value,
                line: Some(line),
            });
        }
        Ok(EnvBlock { vars })
    }

    /// The `NCCL_*` variables among `vars` (e.g. `std::env::vars()`).
    pub fn from_vars<I, K, V>(vars: I) -> EnvBlock
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let vars = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(k, _)| k.starts_with("NCCL_"))
            .map(|(name, value)| EnvVar {
                name,
                value,
                line: None,
            })
            .collect();
        EnvBlock { vars }
    }

    /// Whether nothing at all is set.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }

    /// Every assignment, in order.
    pub fn assignments(&self) -> &[EnvVar] {
        &self.vars
    }

    /// The value `name` ends up with (the last assignment).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .rev()
            .find(|v| v.name == name)
            .map(|v| v.value.as_str())
    }

    /// The effective variables (last assignment of each name), in the
    /// order of their first assignment.
    pub fn effective(&self) -> Vec<&EnvVar> {
        let mut out: Vec<&EnvVar> = Vec::new();
        for v in &self.vars {
            if let Some(slot) = out.iter_mut().find(|o| o.name == v.name) {
                *slot = v;
            } else {
                out.push(v);
            }
        }
        out
    }
}

fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

enum Unquote {
    Unterminated,
    Space,
}

/// The value as the shell would see it, for the simple forms: `"..."`,
/// `'...'`, or a bare word (a trailing ` # comment` dropped).
fn unquote(v: &str) -> Result<String, Unquote> {
    let v = v.trim_end();
    for q in ['"', '\''] {
        if let Some(rest) = v.strip_prefix(q) {
            let end = rest.find(q).ok_or(Unquote::Unterminated)?;
            let after = rest[end + 1..].trim_start();
            if !(after.is_empty() || after.starts_with('#')) {
                return Err(Unquote::Space);
            }
            return Ok(rest[..end].to_owned());
        }
    }
    let bare = match v.find(" #").or_else(|| v.find("\t#")) {
        Some(i) => v[..i].trim_end(),
        None => v,
    };
    if bare.contains([' ', '\t']) {
        return Err(Unquote::Space);
    }
    Ok(bare.to_owned())
}
