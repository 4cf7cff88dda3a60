//! `rdmaperf ports`: every device and port as ibstat and show_gids show
//! them, their counters (and their change over `--watch`), a PASS/FAIL
//! check, JSON and Prometheus text.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use engine::fabric::link::ExpectRate;
use engine::fabric::ports::{
    CounterDeltas, DeviceState, PortExpectation, PortsVerdict, check_ports, error_rises,
};
use serde::Serialize;

use crate::exit::UsageError;
use crate::sysfs::{InventoryError, Sysfs, add_mtus};

/// `rdmaperf ports` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct PortsArgs {
    /// Only this device (e.g. mlx5_0).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEVICE")]
    pub device: Option<String>,
    /// Only this port number.
    #[arg(short = 'i', long = "ib-port", value_name = "PORT", value_parser = clap::value_parser!(u8).range(1..))]
    pub port: Option<u8>,
    /// Print one JSON document on stdout instead of the tables.
    #[arg(long = "json")]
    pub json: bool,
    /// Also list every counter (counters/, counters_ext/, hw_counters/), raw.
    #[arg(long = "counters")]
    pub counters: bool,
    /// Read the counters twice, this many seconds apart, and show their change (implies --counters); with --check, an error counter that rises fails its port.
    #[arg(long = "watch", value_name = "SECONDS", value_parser = watch_seconds)]
    pub watch: Option<f64>,
    /// Judge every port PASS/FAIL (ACTIVE, LinkUp, at the expected rate, no error counter rising during --watch); exit 3 on FAIL.
    #[arg(long = "check")]
    pub check: bool,
    /// The rate every port should run at: auto (the fastest port of the same kind on this host) or Gb/s (200, 400, …). Implies --check.
    #[arg(long = "expect-rate", value_name = "auto|200|400|GBPS")]
    pub expect_rate: Option<ExpectRate>,
    /// How many ports there should be (after -d/-i). Implies --check.
    #[arg(long = "expect-ports", value_name = "N")]
    pub expect_ports: Option<usize>,
    /// Also write the port metrics (and the verdict) as Prometheus text to FILE, atomically (node_exporter's textfile collector).
    #[arg(long = "prom", value_name = "FILE")]
    pub prom: Option<PathBuf>,
    /// Where sysfs is.
    #[command(flatten)]
    pub sysfs: super::SysfsArgs,
}

/// `--watch`: a positive number of seconds, at most a day.
fn watch_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds between 0 and 86400"
        )),
    }
}

/// Reads the devices (ports filtered by `-i`), with MTUs when sysfs is
/// the live one; device errors that are the user's (`-d` naming nothing)
/// are usage errors.
///
/// # Errors
/// A usage error for an unknown `-d`/`-i`; otherwise what
/// [`read_devices`] returns.
pub fn read(
    sysfs: &Sysfs,
    device: Option<&str>,
    port: Option<u8>,
) -> anyhow::Result<Vec<DeviceState>> {
    let mut devices = sysfs.devices(device, port).map_err(|e| match e {
        InventoryError::NoSuchDevice { .. } => UsageError(format!("-d/--ib-dev: {e}")).into(),
        other => anyhow::Error::new(other),
    })?;
    if let Some(p) = port
        && devices.iter().all(|d| d.ports.is_empty())
    {
        return Err(UsageError(format!("-i/--ib-port: no port {p} on the devices read")).into());
    }
    if sysfs.is_live() {
        for problem in add_mtus(&mut devices) {
            eprintln!("rdmaperf: warning: {problem}");
        }
    }
    Ok(devices)
}

/// The JSON document of `rdmaperf ports --json`.
#[derive(Debug, Serialize)]
struct PortsDocument<'a> {
    schema_version: u32,
    kind: &'static str,
    devices: &'a [DeviceState],
    #[serde(skip_serializing_if = "Option::is_none")]
    counter_deltas: Option<&'a CounterDeltas>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verdict: Option<&'a PortsVerdict>,
}

/// Runs `rdmaperf ports`; returns the exit code (3 when --check fails).
///
/// # Errors
/// Usage errors (exit 2) for bad flags, others for unreadable sysfs or
/// output.
pub fn run(args: &PortsArgs) -> anyhow::Result<u8> {
    let check = args.check || args.expect_rate.is_some() || args.expect_ports.is_some();
    if let Some(path) = &args.prom {
        crate::atomic_file::check_writable("--prom", path)?;
    }
    let sysfs = args.sysfs.sysfs();
    let mut devices = read(&sysfs, args.device.as_deref(), args.port)?;
    // With --watch: a second reading, the change between the two, and the
    // error counters that rose; the second reading is the one shown.
    let mut deltas = None;
    let mut port_rises = BTreeMap::new();
    if let Some(seconds) = args.watch {
        eprintln!("rdmaperf: reading the counters again in {seconds} s");
        std::thread::sleep(Duration::from_secs_f64(seconds));
        let after = read(&sysfs, args.device.as_deref(), args.port)?;
        deltas = Some(CounterDeltas::between(&devices, &after, seconds));
        port_rises = error_rises(&devices, &after);
        devices = after;
    }
    let verdict = check.then(|| {
        let expect = PortExpectation {
            rate: args.expect_rate.unwrap_or_default(),
            ports: args.expect_ports,
        };
        check_ports(&devices, &expect, &port_rises)
    });

    let mut out = std::io::BufWriter::new(crate::output::Stdout);
    if args.json {
        let doc = PortsDocument {
            schema_version: engine::results::record::SCHEMA_VERSION,
            kind: "ports",
            devices: &devices,
            counter_deltas: deltas.as_ref(),
            verdict: verdict.as_ref(),
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        engine::fabric::ports::write_text(
            &devices,
            args.counters || args.watch.is_some(),
            deltas.as_ref(),
            &mut out,
        )?;
        if let Some(v) = &verdict {
            writeln!(out)?;
            for pv in &v.ports {
                let state = devices
                    .iter()
                    .find(|d| d.name == pv.device)
                    .and_then(|d| d.ports.iter().find(|p| p.port == pv.port));
                if let Some(state) = state {
                    writeln!(out, "{}", pv.line(state))?;
                }
            }
            writeln!(out, "{}", v.line())?;
        }
    }
    out.flush()?;
    if let Some(path) = &args.prom {
        let text = super::exporter::port_exposition(&devices, verdict.as_ref());
        crate::atomic_file::write_atomically("--prom", path, &text)?;
    }
    Ok(match verdict {
        Some(v) if !v.pass => engine::results::verdict::EXIT_VERDICT_FAIL,
        _ => 0,
    })
}
