//! `rdmaperf exporter`: Prometheus metrics over HTTP.
//!
//! - `/metrics`: this host's ports (state, rate, counters), read from
//!   sysfs at scrape time — node_exporter's `node_infiniband_*` names plus
//!   `rdmaperf_*` for what it lacks.
//! - `/probe?target=HOST[:PORT]&test=write_bw&size=BYTES&duration=SECONDS`:
//!   blackbox_exporter's multi-target pattern. Runs the test as a short
//!   client session against a `--persistent` server at the target — in
//!   this process, as a library call ([`crate::runner::run_pair`]) — and
//!   answers with its `--prom` results plus `rdmaperf_probe_success` and
//!   `rdmaperf_probe_duration_seconds`.
//!
//! Bounds: a probe's whole run is bounded by `--probe-timeout` and by
//! Prometheus' scrape timeout (`X-Prometheus-Scrape-Timeout-Seconds`)
//! less [`SCRAPE_MARGIN`], so a failure is answered before Prometheus
//! gives up; a refused connection is answered at once. One probe at a
//! time per target (a second one answers `rdmaperf_probe_success 0` at
//! once); at most `--max-probes` probes and `--max-connections`
//! connections at a time; no URL can ask for more than `--max-size` bytes
//! or `--max-duration` seconds. A probe runs on a thread of its own: a
//! panic in it fails that probe only, and a run past its bound is
//! abandoned (it ends by its own bounds, and holds its slot until then).

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use engine::fabric::ports::{DeviceState, PortsVerdict};

use super::http::{self, Request, RequestError};
use crate::exit::UsageError;

mod probe;

use probe::{ProbeFlags, probe_arg_refusals, probe_exposition};
pub use probe::{ProbeOutcome, ProbePlan, SCRAPE_MARGIN, probe_budget};

/// The Content-Type of the text exposition format.
const PROM_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `rdmaperf exporter` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ExporterArgs {
    /// Address and port to serve on, e.g. 0.0.0.0:9880 or 127.0.0.1:9880.
    #[arg(long = "listen", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// The device probes run on (default: the test binaries' choice).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEVICE")]
    pub device: Option<String>,
    /// The largest message size a probe URL may ask for.
    #[arg(long = "max-size", value_name = "BYTES", default_value = "1M", value_parser = crate::args::size_arg)]
    pub max_size: u64,
    /// The longest measurement a probe URL may ask for, seconds.
    #[arg(long = "max-duration", value_name = "SECONDS", default_value_t = 10)]
    pub max_duration: u32,
    /// A probe's whole bound, set-up included (a scrape's own timeout, less 0.5 s, bounds it too); a run past it is abandoned.
    #[arg(long = "probe-timeout", value_name = "SECONDS", default_value_t = 30)]
    pub probe_timeout: u32,
    /// At most this many probes at a time (over all targets).
    #[arg(long = "max-probes", value_name = "N", default_value_t = 4)]
    pub max_probes: usize,
    /// At most this many connections at a time; more are answered 503.
    #[arg(long = "max-connections", value_name = "N", default_value_t = 32)]
    pub max_connections: usize,
    /// An extra argument for every probe's test client, e.g. --probe-arg=-u --probe-arg=18 (repeatable).
    #[arg(long = "probe-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub probe_args: Vec<String>,
    /// Also serve the last `rdmaperf health` verdict, flaps, error counts and baseline ratios kept in this state directory (its --state-dir).
    #[arg(long = "health-state-dir", value_name = "DIR")]
    pub health_state_dir: Option<std::path::PathBuf>,
    /// Where sysfs is.
    #[command(flatten)]
    pub sysfs: super::SysfsArgs,
}

/// The exporter's state shared by its connection threads.
#[derive(Debug)]
struct Exporter {
    args: ExporterArgs,
    /// What `/metrics` reads, built once from `--sysfs-root`.
    sysfs: crate::sysfs::Sysfs,
    /// The `--probe-arg`s, parsed once per test binary.
    probe_flags: ProbeFlags,
    /// Targets with a probe running.
    probing: Mutex<BTreeSet<String>>,
    probes: AtomicUsize,
    connections: AtomicUsize,
}

/// Runs the exporter until killed.
///
/// # Errors
/// Usage errors for bad flags or an address that cannot be bound.
pub fn run(args: &ExporterArgs) -> anyhow::Result<u8> {
    if args.max_duration == 0 || args.probe_timeout == 0 || args.max_probes == 0 {
        return Err(UsageError(
            "--max-duration, --probe-timeout and --max-probes must be at least 1".into(),
        )
        .into());
    }
    if args.max_size == 0 {
        return Err(UsageError("--max-size must be at least 1 byte".into()).into());
    }
    // The --probe-args, checked now as each test checks its flags. Ones
    // that only some tests take (`-I`: the write and send tests) are fine:
    // a probe of another test fails with that test's own message, as its
    // command line would. Ones that no test takes are the exporter's usage
    // error, before it listens.
    let probe_flags = ProbeFlags::parse(args);
    let refusals = probe_arg_refusals(args, &probe_flags);
    let tests: Vec<&str> = engine::bench::spec::IMPLEMENTED
        .iter()
        .map(|s| s.binary())
        .collect();
    let refusing: Vec<&str> = refusals.iter().map(|(t, _)| *t).collect();
    if let Some((first, why)) = refusals.first() {
        if tests.iter().all(|t| refusing.contains(t)) {
            return Err(UsageError(format!(
                "--probe-arg: every test refuses them ({first}: {why})"
            ))
            .into());
        }
        eprintln!(
            "rdmaperf exporter: warning: probes of {} will fail: their tests refuse the \
             --probe-args ({first}: {why})",
            refusing.join(", ")
        );
    }
    let listener = TcpListener::bind(args.listen)
        .map_err(|e| UsageError(format!("--listen: cannot listen on {}: {e}", args.listen)))?;
    let exporter = Arc::new(Exporter {
        args: args.clone(),
        sysfs: args.sysfs.sysfs(),
        probe_flags,
        probing: Mutex::new(BTreeSet::new()),
        probes: AtomicUsize::new(0),
        connections: AtomicUsize::new(0),
    });
    eprintln!(
        "rdmaperf exporter: serving /metrics and /probe on http://{}",
        listener.local_addr()?
    );
    for stream in listener.incoming() {
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: do not spin.
                eprintln!("rdmaperf exporter: accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if exporter.connections.fetch_add(1, Ordering::SeqCst) >= args.max_connections {
            exporter.connections.fetch_sub(1, Ordering::SeqCst);
            let _ = http::respond(
                &mut stream,
                503,
                "text/plain",
                "too many connections\n",
                false,
            );
            continue;
        }
        let exporter = Arc::clone(&exporter);
        let spawned = std::thread::Builder::new()
            .name("exporter-conn".into())
            .spawn(move || {
                exporter.serve(stream);
                exporter.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            eprintln!("rdmaperf exporter: cannot start a thread for a connection");
        }
    }
    Ok(0)
}

impl Exporter {
    fn serve(self: &Arc<Self>, mut stream: TcpStream) {
        let request = match http::read_request(&mut stream) {
            Ok(r) => r,
            Err(RequestError::TooLarge) => {
                let _ = http::respond(
                    &mut stream,
                    431,
                    "text/plain",
                    "request head too large\n",
                    false,
                );
                return;
            }
            Err(RequestError::Malformed(m)) => {
                let _ = http::respond(&mut stream, 400, "text/plain", &format!("{m}\n"), false);
                return;
            }
            Err(RequestError::Io(_)) => return,
        };
        let head_only = request.method == "HEAD";
        if request.method != "GET" && !head_only {
            let _ = http::respond(&mut stream, 405, "text/plain", "only GET\n", false);
            return;
        }
        let (status, content_type, body) = match request.path.as_str() {
            "/metrics" => (200, PROM_CONTENT_TYPE, self.metrics()),
            "/probe" => match self.probe(&request) {
                Ok(body) => (200, PROM_CONTENT_TYPE, body),
                Err(bad) => (400, "text/plain", format!("{bad}\n")),
            },
            "/" => (
                200,
                "text/html",
                "<html><head><title>rdmaperf exporter</title></head><body><h1>rdmaperf exporter</h1>\
                 <p><a href=\"/metrics\">/metrics</a>: this host's RDMA ports</p>\
                 <p>/probe?target=HOST[:PORT]&amp;test=write_bw&amp;size=65536&amp;duration=2: a short test against a --persistent server</p>\
                 </body></html>\n"
                    .to_owned(),
            ),
            _ => (404, "text/plain", "not found: try /metrics or /probe\n".to_owned()),
        };
        let _ = http::respond(&mut stream, status, content_type, &body, head_only);
    }

    /// `/metrics`: the ports, read now, and with `--health-state-dir`
    /// the last health verdict.
    fn metrics(&self) -> String {
        let mut text = match self.sysfs.devices(None, None) {
            Ok(devices) => port_exposition_with_status(&devices, None, None),
            Err(e) => port_exposition_with_status(&[], None, Some(&e.to_string())),
        };
        if let Some(dir) = &self.args.health_state_dir {
            let mut x = engine::fabric::prom::text::Exposition::new();
            let report = crate::health::state_dir::last_report(dir);
            engine::fabric::prom::health::add_health_metrics(&mut x, report.as_ref());
            text.push_str(&x.render());
        }
        text
    }

    /// `/probe`: validates the URL (a bad one is a 400), then runs the
    /// test; a failed test is `rdmaperf_probe_success 0`, not an HTTP
    /// error.
    fn probe(self: &Arc<Self>, request: &Request) -> Result<String, String> {
        let plan = ProbePlan::from_request(request, &self.args)?;
        let budget = probe_budget(request, &self.args)?;
        let started = Instant::now();
        let outcome = self.run_probe(&plan, budget, started + budget);
        Ok(probe_exposition(&plan, &outcome, started.elapsed()))
    }

    /// Takes a place for a probe of `target`: one probe at a time per
    /// target, at most `--max-probes` in all.
    fn take_slot(self: &Arc<Self>, target: String) -> Result<ProbeSlot, &'static str> {
        {
            let Ok(mut probing) = self.probing.lock() else {
                return Err("exporter state poisoned");
            };
            if !probing.insert(target.clone()) {
                return Err("a probe of this target is already running");
            }
        }
        // From here the slot releases what it took, whatever happens.
        let slot = ProbeSlot {
            exporter: Arc::clone(self),
            target,
        };
        if self.probes.fetch_add(1, Ordering::SeqCst) >= self.args.max_probes {
            return Err("too many probes running (--max-probes)");
        }
        Ok(slot)
    }

    /// Runs the probe's test in this process, as a library call
    /// ([`crate::runner::run_pair`]) on a thread of its own, and waits
    /// for it at most `budget`, until `deadline` (the request's start plus
    /// `budget`, so the set-up before the run counts). A run past it is abandoned: the answer
    /// says so at once, and the run, whose every wait is bounded by a
    /// `--timeout` within the budget, ends on its own and only then frees
    /// its slot. A panic in it is a failed probe, never the exporter's end.
    fn run_probe(
        self: &Arc<Self>,
        plan: &ProbePlan,
        budget: Duration,
        deadline: Instant,
    ) -> ProbeOutcome {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let slot = match self.take_slot(plan.target_label()) {
            Ok(s) => s,
            Err(why) => return ProbeOutcome::failed(why),
        };
        let prom = std::env::temp_dir().join(format!(
            "rdmaperf-probe-{}-{}.prom",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let options = match self
            .probe_flags
            .of(&plan.test)
            .and_then(|f| plan.options(&self.args, f, &prom, budget))
        {
            Ok(o) => o,
            Err(e) => return ProbeOutcome::failed(&format!("{}: error: {e:#}", plan.test)),
        };
        let (done, outcome) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("probe-{}", plan.test))
            .spawn(move || {
                let _slot = slot;
                let result = crate::runner::run_pair(&options);
                let results = std::fs::read_to_string(&prom).ok();
                let _ = std::fs::remove_file(&prom);
                let _ = done.send((result, results));
            });
        if let Err(e) = spawned {
            return ProbeOutcome::failed(&format!("cannot start a thread for the probe: {e}"));
        }
        match outcome.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((Ok(summary), results)) if summary.exit_code == 0 && results.is_some() => {
                ProbeOutcome {
                    success: true,
                    reason: None,
                    results,
                }
            }
            Ok((Ok(summary), results)) => ProbeOutcome {
                success: false,
                reason: Some(format!(
                    "{} ended with exit code {} (a verdict failed)",
                    plan.test, summary.exit_code
                )),
                results,
            },
            Ok((Err(e), _)) => ProbeOutcome::failed(&format!("{}: error: {e:#}", plan.test)),
            Err(mpsc::RecvTimeoutError::Timeout) => ProbeOutcome::failed(&format!(
                "{} did not end within the probe's bound of {:.1} s (--probe-timeout, or the scrape's timeout less {:.1} s); abandoned",
                plan.test,
                budget.as_secs_f64(),
                SCRAPE_MARGIN.as_secs_f64()
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                ProbeOutcome::failed(&format!("{} panicked", plan.test))
            }
        }
    }
}

/// A probe's place (its target's slot and one of `--max-probes`), held
/// by its run and given back when that ends.
#[derive(Debug)]
struct ProbeSlot {
    exporter: Arc<Exporter>,
    target: String,
}

impl Drop for ProbeSlot {
    fn drop(&mut self) {
        self.exporter.probes.fetch_sub(1, Ordering::SeqCst);
        if let Ok(mut probing) = self.exporter.probing.lock() {
            probing.remove(&self.target);
        }
    }
}

/// The port metrics of `devices` and, after `ports --check`, the verdict
/// of each port (`rdmaperf_port_check_pass`).
pub fn port_exposition(devices: &[DeviceState], verdict: Option<&PortsVerdict>) -> String {
    port_exposition_with_status(devices, verdict, None)
}

/// As [`port_exposition`], plus `rdmaperf_sysfs_read_success` (0 with
/// `error` when the devices could not be read at all).
fn port_exposition_with_status(
    devices: &[DeviceState],
    verdict: Option<&PortsVerdict>,
    error: Option<&str>,
) -> String {
    use engine::fabric::prom::text::MetricType;
    let mut x = engine::fabric::prom::ports::port_metrics(devices);
    x.sample(
        "rdmaperf_sysfs_read_success",
        "Whether the RDMA devices could be read from sysfs (1) or not (0).",
        MetricType::Gauge,
        &[],
        if error.is_some() { 0.0 } else { 1.0 },
    );
    if let Some(v) = verdict {
        for p in &v.ports {
            let port = p.port.to_string();
            x.sample(
                "rdmaperf_port_check_pass",
                "Whether rdmaperf ports --check passed the port (ACTIVE, LinkUp, expected rate, no rising error counter): 1 pass, 0 fail.",
                MetricType::Gauge,
                &[("device", &p.device), ("port", &port)],
                if p.pass { 1.0 } else { 0.0 },
            );
        }
        x.sample(
            "rdmaperf_ports_check_pass",
            "Whether rdmaperf ports --check passed every port and the port count: 1 pass, 0 fail.",
            MetricType::Gauge,
            &[],
            if v.pass { 1.0 } else { 0.0 },
        );
    }
    let mut text = x.render();
    if let Some(e) = error {
        text.insert_str(0, &format!("# {}\n", e.replace('\n', " ")));
    }
    text
}
