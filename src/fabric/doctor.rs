//! `rdmaperf doctor nccl`: a job's NCCL variables checked against this
//! machine (`engine::nccl` judges; this reads the machine, the files and
//! picks the exit code).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use engine::nccl;

use crate::exit::UsageError;
use crate::sysfs::{NetDevAttrs, Sysfs};

/// `rdmaperf doctor nccl` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct NcclArgs {
    /// Read the variables from FILE (lines `export NAME=value` or `NAME=value`, as pasted into job scripts) instead of the environment.
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Option<PathBuf>,
    /// Also read an NCCL log (NCCL_DEBUG=INFO) and report the transport each rank chose and every warning.
    #[arg(long = "log", value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Print one JSON document on stdout instead of the lines.
    #[arg(long = "json")]
    pub json: bool,
    /// Where sysfs is.
    #[command(flatten)]
    pub sysfs: super::SysfsArgs,
}

/// The largest `--env-file` or `--log` read (a log of a large job can be
/// big; beyond this the tail is not read and a warning says so).
const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// Reads a file named by a flag, at most [`MAX_FILE_BYTES`] of it (a
/// warning says when there was more); unreadable → exit 2 naming it.
fn read_flag_file(flag: &str, path: &Path) -> anyhow::Result<String> {
    let (text, cut) = read_capped(path, MAX_FILE_BYTES)
        .map_err(|e| UsageError(format!("{flag}: cannot read {}: {e}", path.display())))?;
    if cut {
        eprintln!(
            "rdmaperf: warning: {flag} {}: only its first {MAX_FILE_BYTES} bytes are read",
            path.display()
        );
    }
    Ok(text)
}

/// The first `cap` bytes of a file (lossy UTF-8), and whether it had more.
fn read_capped(path: &Path, cap: u64) -> std::io::Result<(String, bool)> {
    use std::io::Read;
    let mut bytes = Vec::new();
    // One byte beyond the cap tells a file of exactly `cap` bytes from a
    // longer one.
    std::fs::File::open(path)?
        .take(cap + 1)
        .read_to_end(&mut bytes)?;
    let cut = bytes.len() as u64 > cap;
    bytes.truncate(cap as usize);
    Ok((String::from_utf8_lossy(&bytes).into_owned(), cut))
}

/// This machine's network interfaces: `<sysfs>/class/net/<if>/operstate`,
/// and, on the live system, their addresses.
pub fn read_interfaces(sysfs: &Sysfs) -> Vec<nccl::env::NetInterface> {
    let mut addresses: BTreeMap<String, Vec<std::net::IpAddr>> = BTreeMap::new();
    if sysfs.is_live()
        && let Ok(addrs) = nix::ifaddrs::getifaddrs()
    {
        for a in addrs {
            let Some(addr) = a.address else { continue };
            let ip = if let Some(v4) = addr.as_sockaddr_in() {
                std::net::IpAddr::V4(v4.ip())
            } else if let Some(v6) = addr.as_sockaddr_in6() {
                std::net::IpAddr::V6(v6.ip())
            } else {
                continue;
            };
            addresses.entry(a.interface_name).or_default().push(ip);
        }
    }
    sysfs
        .net_interfaces()
        .into_iter()
        .map(
            |NetDevAttrs {
                 name,
                 operstate,
                 flags,
             }| {
                let oper = operstate.unwrap_or_default();
                let flags =
                    flags.and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok());
                // IFF_UP (0x1): administratively up; "unknown" operstate is
                // what lo and many virtual devices report while working.
                let up = oper == "up" || (oper == "unknown" && flags.is_some_and(|f| f & 1 == 1));
                nccl::env::NetInterface {
                    addresses: addresses.remove(&name).unwrap_or_default(),
                    name,
                    up,
                }
            },
        )
        .collect()
}

/// GPUs bound to the nvidia driver and a loaded peer-memory module, as
/// sysfs shows them.
pub fn read_gpus(sysfs: &Sysfs) -> nccl::env::GpuState {
    let peer_mem = ["nvidia_peermem", "nv_peer_mem"]
        .iter()
        .find(|m| sysfs.has_module(m))
        .map(|m| (*m).to_owned());
    nccl::env::GpuState {
        gpus: sysfs.nvidia_devices() as u32,
        peer_memory_module: peer_mem,
    }
}

/// Runs `rdmaperf doctor nccl`; exit 3 when any finding is an error.
///
/// # Errors
/// Usage errors (exit 2): an unreadable `--env-file`/`--log`, a line of
/// the env file that is not a variable.
pub fn run(args: &NcclArgs) -> anyhow::Result<u8> {
    // Every input first: bad input stops before anything is printed.
    let (env, source) = match &args.env_file {
        Some(path) => {
            let text = read_flag_file("--env-file", path)?;
            let env = nccl::env::EnvBlock::parse(&text)
                .map_err(|e| UsageError(format!("--env-file {}: {e}", path.display())))?;
            (env, format!("--env-file {}", path.display()))
        }
        None => (
            nccl::env::EnvBlock::from_vars(std::env::vars()),
            "the environment".to_owned(),
        ),
    };
    let log_text = match &args.log {
        Some(path) => Some(read_flag_file("--log", path)?),
        None => None,
    };
    let sysfs = args.sysfs.sysfs();
    let devices = match sysfs.devices(None, None) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rdmaperf: warning: {e}; checking against a machine without RDMA devices");
            Vec::new()
        }
    };
    let machine = nccl::env::Machine {
        devices,
        interfaces: read_interfaces(&sysfs),
        gpus: read_gpus(&sysfs),
    };
    let mut findings = nccl::env::check(&env, &machine);
    let log = log_text.as_deref().map(nccl::log::read_log);
    if let Some(l) = &log {
        findings.extend(l.findings());
    }
    let report = nccl::Report::new(findings, log);
    let failed = report.summary.errors > 0;
    let mut out = std::io::BufWriter::new(crate::output::Stdout);
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        eprintln!(
            "rdmaperf doctor nccl: the NCCL variables of {source}, checked against this machine"
        );
        for f in &report.findings {
            writeln!(out, "{}", f.line())?;
        }
        let s = report.summary;
        writeln!(
            out,
            "doctor nccl: {} error(s), {} warning(s), {} note(s)",
            s.errors, s.warnings, s.notes
        )?;
    }
    out.flush()?;
    Ok(if failed {
        engine::results::verdict::EXIT_VERDICT_FAIL
    } else {
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_beyond_the_cap_is_cut_there_and_says_so() {
        let dir = std::env::temp_dir().join(format!("rdmaperf-doctor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nccl.log");
        std::fs::write(&path, "0123456789").unwrap();
        assert_eq!(read_capped(&path, 4).unwrap(), ("0123".to_owned(), true));
        assert_eq!(
            read_capped(&path, 10).unwrap(),
            ("0123456789".to_owned(), false)
        );
        let e = read_flag_file("--log", &dir.join("missing.log")).unwrap_err();
        assert!(e.to_string().starts_with("--log: cannot read "), "{e}");
        assert!(e.downcast_ref::<UsageError>().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
