//! NCCL's `NCCL_DEBUG=INFO` logs, read for the transport each process
//! ended up on and the warnings and completion errors it logged
//! ([`read_log`]).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::nccl::{Finding, Severity};

// --- logs ----------------------------------------------------------------------------

/// What one process (`host:pid`) of the job logged about its network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcessLog {
    /// The host name of NCCL's line prefix.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// The CUDA devices of its lines (`[0]`).
    pub cuda_devices: Vec<u32>,
    /// Its ranks (from the `Init COMPLETE` lines).
    pub ranks: Vec<u32>,
    /// The network NCCL used: `IB`, `Socket`, or a plugin's name; `None`
    /// when the log does not say (a single-node job).
    pub transport: Option<String>,
    /// What `NET/IB : Using` listed (`[0]mlx5_0:1/IB [RO]; OOB eth0:…`).
    pub net_ib: Option<String>,
    /// What `NET/Socket : Using` listed.
    pub net_socket: Option<String>,
    /// Whether it logged `NET/IB : No device found.`.
    pub ib_no_device: bool,
    /// Channel lines per network (`via NET/IB/0` counts under `IB`).
    pub channels: BTreeMap<String, usize>,
}

impl ProcessLog {
    /// `host:pid`.
    pub fn label(&self) -> String {
        format!("{}:{}", self.host, self.pid)
    }
}

/// One distinct `NCCL WARN` message of a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogWarning {
    /// `host:pid` of the line.
    pub process: String,
    /// The first line (1-based) it was on.
    pub line: usize,
    /// How many times this process logged it.
    pub count: usize,
    /// The message after `NCCL WARN`.
    pub message: String,
    /// The work completion status of a completion error (`12`).
    pub wc_status: Option<u32>,
    /// What it means, when known.
    pub meaning: Option<String>,
    /// `error` for completion errors and fatal bootstrap failures.
    pub severity: Severity,
}

/// What an `NCCL_DEBUG=INFO` log said: the version, each process's
/// transport, and the warnings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LogReport {
    /// `2.21.5+cuda12.4` of `NCCL version 2.21.5+cuda12.4`.
    pub version: Option<String>,
    /// Lines read.
    pub lines: usize,
    /// Lines of NCCL's logger (`NCCL INFO`, `NCCL WARN`).
    pub nccl_lines: usize,
    /// The processes, in order of first appearance.
    pub processes: Vec<ProcessLog>,
    /// The distinct warnings, in order of first appearance.
    pub warnings: Vec<LogWarning>,
}

/// The name of a work completion status (`enum ibv_wc_status`).
pub fn wc_status_name(status: u32) -> Option<&'static str> {
    const NAMES: [&str; 22] = [
        "IBV_WC_SUCCESS",
        "IBV_WC_LOC_LEN_ERR",
        "IBV_WC_LOC_QP_OP_ERR",
        "IBV_WC_LOC_EEC_OP_ERR",
        "IBV_WC_LOC_PROT_ERR",
        "IBV_WC_WR_FLUSH_ERR",
        "IBV_WC_MW_BIND_ERR",
        "IBV_WC_BAD_RESP_ERR",
        "IBV_WC_LOC_ACCESS_ERR",
        "IBV_WC_REM_INV_REQ_ERR",
        "IBV_WC_REM_ACCESS_ERR",
        "IBV_WC_REM_OP_ERR",
        "IBV_WC_RETRY_EXC_ERR",
        "IBV_WC_RNR_RETRY_EXC_ERR",
        "IBV_WC_LOC_RDD_VIOL_ERR",
        "IBV_WC_REM_INV_RD_REQ_ERR",
        "IBV_WC_REM_ABORT_ERR",
        "IBV_WC_INV_EECN_ERR",
        "IBV_WC_INV_EEC_STATE_ERR",
        "IBV_WC_FATAL_ERR",
        "IBV_WC_RESP_TIMEOUT_ERR",
        "IBV_WC_GENERAL_ERR",
    ];
    NAMES.get(usize::try_from(status).ok()?).copied()
}

/// What a completion status means for an NCCL job, for the usual ones.
fn wc_meaning(status: u32) -> Option<&'static str> {
    Some(match status {
        12 => {
            "transport retry counter exceeded: the peer did not acknowledge in \
             NCCL_IB_TIMEOUT × (NCCL_IB_RETRY_CNT + 1): peer unreachable (dead host, wrong GID, \
             routing), a link problem, or heavy congestion; check the link and \
             NCCL_IB_TIMEOUT/NCCL_IB_RETRY_CNT"
        }
        13 => {
            "receiver-not-ready retry counter exceeded: the peer had no receive posted in time \
             (a stalled or dead peer process)"
        }
        5 => {
            "work request flushed: the QP was already in error; a consequence of an earlier \
             error, look for the first one"
        }
        4 => {
            "local protection error: a memory registration problem (GPUDirect RDMA through \
             nvidia_peermem / dma-buf, or PCI ACS enabled between GPU and NIC)"
        }
        10 => "remote access error: the peer rejected the access (its memory key or registration)",
        _ => return None,
    })
}

/// The status of a completion error: `with error 12,`, `status=12` or
/// `status=IBV_WC_RETRY_EXC_ERR(12)`.
fn completion_status(msg: &str) -> Option<u32> {
    if !msg.contains("Got completion") {
        return None;
    }
    let lead = |s: &str| -> Option<u32> {
        let d: String = s.chars().take_while(char::is_ascii_digit).collect();
        d.parse().ok()
    };
    if let Some(i) = msg.find("with error ") {
        return lead(&msg[i + "with error ".len()..]);
    }
    let i = msg.find("status=")?;
    let rest = &msg[i + "status=".len()..];
    lead(rest).or_else(|| {
        let word = rest.split(' ').next()?;
        lead(&word[word.rfind('(')? + 1..])
    })
}

/// The meaning of a WARN message that is not a completion error.
fn warn_meaning(msg: &str) -> Option<(Severity, &'static str)> {
    let table: [(&str, Severity, &str); 6] = [
        (
            "no socket interface found",
            Severity::Error,
            "NCCL_SOCKET_IFNAME selects no interface with an IP address: NCCL cannot start",
        ),
        (
            "ibv_modify_qp",
            Severity::Warning,
            "a queue pair could not be connected: often a wrong NCCL_IB_GID_INDEX (EINVAL) or \
             NICs that cannot reach each other (ETIMEDOUT)",
        ),
        (
            "ibv_reg_mr",
            Severity::Warning,
            "memory registration failed: GPUDirect RDMA needs nvidia_peermem or dma-buf; \
             host memory needs a large enough locked-memory limit (ulimit -l)",
        ),
        (
            "ibv_reg_dmabuf_mr",
            Severity::Warning,
            "dma-buf memory registration failed: GPUDirect RDMA through dma-buf is not \
             supported by this kernel/driver/NIC combination",
        ),
        (
            "Connection closed by remote peer",
            Severity::Warning,
            "a peer process closed its socket: it probably died; its own log has the first \
             error",
        ),
        (
            "Connection refused",
            Severity::Warning,
            "a peer refused the connection: it is not (yet) listening, or a firewall",
        ),
    ];
    table
        .iter()
        .find(|(k, _, _)| msg.contains(k))
        .map(|(_, s, m)| (*s, *m))
}

/// `host`, `pid`, `cudaDev` of NCCL's prefix `host:pid:tid [cudaDev]`,
/// from the text before `NCCL INFO`/`NCCL WARN` (a timestamp, a launcher
/// prefix such as `[1,0]<stdout>:`, or a WARN's `file:line (func)` may
/// surround it).
fn parse_prefix(before: &str) -> Option<(String, u32, u32)> {
    let tokens: Vec<&str> = before.split_whitespace().collect();
    for w in tokens.windows(2) {
        let dev = w[1]
            .strip_prefix('[')
            .and_then(|d| d.strip_suffix(']'))
            .and_then(|d| d.parse::<u32>().ok());
        let Some(dev) = dev else { continue };
        let mut parts = w[0].rsplitn(3, ':');
        let (Some(tid), Some(pid), Some(host)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if tid.parse::<u64>().is_err() {
            continue;
        }
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        // A launcher's own prefix ends in ':' before the host.
        let host = host.rsplit(':').next().unwrap_or(host);
        if host.is_empty() {
            continue;
        }
        return Some((host.to_owned(), pid, dev));
    }
    None
}

/// Reads an NCCL log (`NCCL_DEBUG=INFO`, ranks interleaved).
pub fn read_log(text: &str) -> LogReport {
    let mut report = LogReport::default();
    let mut warn_index: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        report.lines += 1;
        if report.version.is_none()
            && let Some(at) = line.find("NCCL version ")
        {
            report.version = line[at + "NCCL version ".len()..]
                .split_whitespace()
                .next()
                .map(str::to_owned);
        }
        let (pos, level, len) = match (line.find(" NCCL INFO"), line.find(" NCCL WARN")) {
            (Some(p), _) => (p, "INFO", " NCCL INFO".len()),
            (None, Some(p)) => (p, "WARN", " NCCL WARN".len()),
            (None, None) => continue,
        };
        report.nccl_lines += 1;
        let msg = line[pos + len..].trim();
        let (host, pid, dev) = parse_prefix(&line[..pos]).unwrap_or_else(|| ("?".to_owned(), 0, 0));
        let idx = match report
            .processes
            .iter()
            .position(|p| p.host == host && p.pid == pid)
        {
            Some(idx) => idx,
            None => {
                report.processes.push(ProcessLog {
                    host: host.clone(),
                    pid,
                    ..ProcessLog::default()
                });
                report.processes.len() - 1
            }
        };
        let proc_ = &mut report.processes[idx];
        if !proc_.cuda_devices.contains(&dev) {
            proc_.cuda_devices.push(dev);
        }
        if level == "WARN" {
            let label = proc_.label();
            let key = (label.clone(), msg.to_owned());
            if let Some(&w) = warn_index.get(&key) {
                report.warnings[w].count += 1;
                continue;
            }
            let status = completion_status(msg);
            let (severity, meaning) = match status {
                Some(st) => (
                    Severity::Error,
                    Some(match (wc_status_name(st), wc_meaning(st)) {
                        (Some(n), Some(m)) => format!("{n}: {m}"),
                        (Some(n), None) => n.to_owned(),
                        _ => format!("work completion status {st}"),
                    }),
                ),
                None => match warn_meaning(msg) {
                    Some((s, m)) => (s, Some(m.to_owned())),
                    None => (Severity::Warning, None),
                },
            };
            warn_index.insert(key, report.warnings.len());
            report.warnings.push(LogWarning {
                process: label,
                line: i + 1,
                count: 1,
                message: msg.to_owned(),
                wc_status: status,
                meaning,
                severity,
            });
            continue;
        }
        if let Some(rest) = msg.strip_prefix("NET/IB : Using") {
            proc_.net_ib = Some(rest.trim().to_owned());
        } else if msg.starts_with("NET/IB : No device found") {
            proc_.ib_no_device = true;
        } else if let Some(rest) = msg.strip_prefix("NET/Socket : Using") {
            proc_.net_socket = Some(rest.trim().to_owned());
        } else if let Some(rest) = msg.strip_prefix("Using network ") {
            proc_.transport = Some(rest.trim().to_owned());
        } else if let Some(at) = msg.find(" via NET/") {
            let net = msg[at + " via NET/".len()..]
                .split('/')
                .next()
                .unwrap_or_default();
            *proc_.channels.entry(net.to_owned()).or_default() += 1;
        }
        if msg.contains("Init COMPLETE") {
            let words: Vec<&str> = msg.split_whitespace().collect();
            if let Some(r) = words
                .windows(2)
                .find(|w| w[0] == "rank")
                .and_then(|w| w[1].parse::<u32>().ok())
                && !proc_.ranks.contains(&r)
            {
                proc_.ranks.push(r);
            }
        }
    }
    for p in &mut report.processes {
        if p.transport.is_none() {
            p.transport = p
                .channels
                .iter()
                .max_by_key(|(_, n)| **n)
                .map(|(k, _)| k.clone())
                .or_else(|| match (&p.net_ib, p.ib_no_device, &p.net_socket) {
                    (Some(_), false, _) => Some("IB".to_owned()),
                    (_, true, Some(_)) => Some("Socket".to_owned()),
                    _ => None,
                });
        }
    }
    report
}

impl LogReport {
    /// The findings: a process on sockets is an error; each warning; the
    /// version.
    pub fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        if self.nccl_lines == 0 {
            out.push(
                Finding::new(
                    Severity::Warning,
                    "log",
                    format!(
                        "no NCCL log lines in {} lines (NCCL INFO / NCCL WARN)",
                        self.lines
                    ),
                )
                .with_fix("run the job with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET)"),
            );
            return out;
        }
        match &self.version {
            Some(v) => out.push(Finding::new(Severity::Note, "log", format!("NCCL {v}"))),
            None => out.push(Finding::new(
                Severity::Note,
                "log",
                "no \"NCCL version\" line (it is logged by the first rank at INFO)",
            )),
        }
        for p in &self.processes {
            let who = p.label();
            let ranks = if p.ranks.is_empty() {
                String::new()
            } else {
                let r: Vec<String> = p.ranks.iter().map(u32::to_string).collect();
                format!("rank {} ", r.join(", "))
            };
            match p.transport.as_deref() {
                Some("Socket") => {
                    let mut why = String::new();
                    if p.ib_no_device {
                        why.push_str(" after \"NET/IB : No device found.\"");
                    }
                    out.push(
                        Finding::new(
                            Severity::Error,
                            &who,
                            format!(
                                "{ranks}uses NET/Socket (TCP), not IB/RoCE{why}{}: likely \
                                 NCCL_IB_HCA selecting no ACTIVE port, no ACTIVE RDMA port on \
                                 {}, or NCCL_IB_DISABLE=1",
                                p.net_socket
                                    .as_deref()
                                    .map(|s| format!(" (Socket : Using {s})"))
                                    .unwrap_or_default(),
                                p.host
                            ),
                        )
                        .with_fix(format!(
                            "run `rdmaperf ports` and `rdmaperf doctor nccl` with the job's \
                             variables on {}",
                            p.host
                        )),
                    );
                }
                Some("IB") => out.push(Finding::new(
                    Severity::Note,
                    &who,
                    format!(
                        "{ranks}uses NET/IB{}",
                        p.net_ib
                            .as_deref()
                            .map(|s| format!(": {s}"))
                            .unwrap_or_default()
                    ),
                )),
                Some(other) => out.push(Finding::new(
                    Severity::Note,
                    &who,
                    format!("{ranks}uses network {other}"),
                )),
                None => {}
            }
        }
        for w in &self.warnings {
            let mut msg = format!("NCCL WARN {}", w.message);
            if w.count > 1 {
                msg.push_str(&format!(" (×{})", w.count));
            }
            if let Some(m) = &w.meaning {
                msg.push_str(&format!(" — {m}"));
            }
            out.push(Finding::new(w.severity, &w.process, msg));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::has_errors;

    // --- logs ----------------------------------------------------------------------------------------

    const HEALTHY: &str = include_str!("../../../../tests/fixtures/nccl/healthy-ib.log");
    const FALLBACK: &str = include_str!("../../../../tests/fixtures/nccl/socket-fallback.log");

    #[test]
    fn the_healthy_log_is_ib_everywhere_and_has_no_error() {
        let r = read_log(HEALTHY);
        assert_eq!(r.version.as_deref(), Some("2.21.5+cuda12.4"));
        assert_eq!(r.processes.len(), 4);
        for p in &r.processes {
            assert_eq!(p.transport.as_deref(), Some("IB"), "{p:?}");
            assert!(p.net_ib.as_deref().unwrap().contains("mlx5_0:1/IB"));
            assert!(!p.ib_no_device);
        }
        let ranks: Vec<(String, Vec<u32>)> = r
            .processes
            .iter()
            .map(|p| (p.label(), p.ranks.clone()))
            .collect();
        assert_eq!(
            ranks,
            [
                ("node01:4101".to_owned(), vec![0]),
                ("node01:4102".to_owned(), vec![1]),
                ("node02:5201".to_owned(), vec![2]),
                ("node02:5202".to_owned(), vec![3]),
            ]
        );
        assert!(r.warnings.is_empty());
        let f = r.findings();
        assert!(!has_errors(&f), "{f:#?}");
        assert!(f.iter().any(|x| x.message.contains("NCCL 2.21.5+cuda12.4")));
    }

    #[test]
    fn the_socket_fallback_log_is_an_error_per_process() {
        let r = read_log(FALLBACK);
        assert_eq!(r.processes.len(), 4);
        for p in &r.processes {
            assert_eq!(p.transport.as_deref(), Some("Socket"), "{p:?}");
            assert!(p.ib_no_device);
            assert!(
                p.net_socket
                    .as_deref()
                    .unwrap()
                    .starts_with("[0]eth0:10.0.0.")
            );
            assert_eq!(p.channels.get("Socket").copied(), Some(2), "{p:?}");
        }
        assert_eq!(r.warnings.len(), 1);
        let w = &r.warnings[0];
        assert_eq!(w.process, "node02:5202");
        assert_eq!(w.wc_status, Some(12));
        assert_eq!(w.severity, Severity::Error);
        assert!(
            w.meaning
                .as_deref()
                .unwrap()
                .starts_with("IBV_WC_RETRY_EXC_ERR")
        );
        let f = r.findings();
        let errs: Vec<&Finding> = f.iter().filter(|x| x.severity == Severity::Error).collect();
        assert_eq!(errs.len(), 5, "{f:#?}");
        assert!(
            errs[0].message.contains("NET/Socket") && errs[0].message.contains("No device found")
        );
        assert!(errs[0].message.contains("NCCL_IB_HCA"));
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("Socket"));
    }

    #[test]
    fn completion_errors_in_each_format() {
        let old = "h:1:2 [0] transport/net_ib.cc:1237 NCCL WARN NET/IB : Got completion from peer \
                   10.0.0.2<41284> with error 12, opcode 0, len 0, vendor err 129 (Recv)";
        let v221 = "h:1:2 [0] transport/net_ib.cc:1909 NCCL WARN NET/IB : Got completion from peer \
                    10.0.0.2<41284> with status=13 opcode=0 len=0 vendor err 129 (Recv) localGid \
                    ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2";
        let newest = "[2025-05-01 10:00:00] h:1:2 [0] transport/net_ib/p2p.cc:688 \
                      (ncclIbLogCompletionWithError) NCCL WARN NET/IB: Got completion from peer \
                      10.0.0.2<41284> with status=IBV_WC_WR_FLUSH_ERR(5) opcode=IBV_WC_RECV(128) \
                      vendor_err=244  hca mlx5_0";
        for (line, status, name) in [
            (old, 12, "IBV_WC_RETRY_EXC_ERR"),
            (v221, 13, "IBV_WC_RNR_RETRY_EXC_ERR"),
            (newest, 5, "IBV_WC_WR_FLUSH_ERR"),
        ] {
            let r = read_log(&format!("\n{line}\n"));
            assert_eq!(r.warnings.len(), 1, "{line}");
            let w = &r.warnings[0];
            assert_eq!(w.wc_status, Some(status), "{line}");
            assert_eq!(w.process, "h:1", "{line}");
            assert!(w.meaning.as_deref().unwrap().starts_with(name), "{line}");
            assert!(has_errors(&r.findings()));
        }
        assert_eq!(wc_status_name(4), Some("IBV_WC_LOC_PROT_ERR"));
        assert_eq!(wc_status_name(10), Some("IBV_WC_REM_ACCESS_ERR"));
        assert_eq!(wc_status_name(99), None);
    }

    #[test]
    fn log_prefixes_of_launchers_and_repeated_warnings() {
        let text = "[1,0]<stdout>:gpu-7:300:301 [3] NCCL INFO Using network IB\n\
                    0: gpu-8:400:401 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[3] [send] via NET/Socket/0\n\
                    gpu-8:400:402 [0] bootstrap.cc:126 NCCL WARN Bootstrap : no socket interface found\n\
                    gpu-8:400:402 [0] bootstrap.cc:126 NCCL WARN Bootstrap : no socket interface found\n\
                    some other program's line\n";
        let r = read_log(text);
        assert_eq!(r.lines, 5);
        assert_eq!(r.nccl_lines, 4);
        let labels: Vec<String> = r.processes.iter().map(ProcessLog::label).collect();
        assert_eq!(labels, ["gpu-7:300", "gpu-8:400"]);
        assert_eq!(r.processes[0].cuda_devices, [3]);
        assert_eq!(r.processes[1].transport.as_deref(), Some("Socket"));
        assert_eq!(r.warnings.len(), 1);
        assert_eq!(r.warnings[0].count, 2);
        assert_eq!(r.warnings[0].severity, Severity::Error);
        assert!(
            r.warnings[0]
                .meaning
                .as_deref()
                .unwrap()
                .contains("NCCL_SOCKET_IFNAME")
        );
        let f = r.findings();
        assert!(f.iter().any(|x| x.message.contains("(×2)")));
        // No version line: a note only.
        assert_eq!(r.version, None);
    }

    #[test]
    fn a_log_without_nccl_lines_says_so() {
        let r = read_log("hello\nworld\n");
        let f = r.findings();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(f[0].fix.as_deref().unwrap().contains("NCCL_DEBUG=INFO"));
    }
}
