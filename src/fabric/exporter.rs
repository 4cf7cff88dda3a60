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
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use engine::bench::spec::{IMPLEMENTED, TestSpec};
use engine::fabric::ports::{DeviceState, PortsVerdict};

use super::http::{self, Request, RequestError};
use crate::args::Parsed;
use crate::exit::UsageError;
use crate::options::RunOptions;

/// The test a probe's `test=` names: a binary of a test this build runs.
fn probe_spec(binary: &str) -> Option<TestSpec> {
    IMPLEMENTED.into_iter().find(|s| s.binary() == binary)
}

/// The binaries a probe may run, each once (`atomic_bw` runs two specs).
fn probe_binaries() -> Vec<&'static str> {
    let mut names: Vec<&str> = Vec::new();
    for s in IMPLEMENTED {
        if !names.contains(&s.binary()) {
            names.push(s.binary());
        }
    }
    names
}

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
    /// Where sysfs is.
    #[command(flatten)]
    pub sysfs: super::SysfsArgs,
}

/// The exporter's state shared by its connection threads.
#[derive(Debug)]
struct Exporter {
    args: ExporterArgs,
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
    let tests: Vec<&str> = IMPLEMENTED.iter().map(|s| s.binary()).collect();
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

    /// `/metrics`: the ports, read now.
    fn metrics(&self) -> String {
        match self.args.sysfs.sysfs().devices(None, None) {
            Ok(devices) => port_exposition_with_status(&devices, None, None),
            Err(e) => port_exposition_with_status(&[], None, Some(&e.to_string())),
        }
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

/// What a probe keeps of Prometheus' scrape timeout for its answer to
/// arrive (blackbox_exporter's `--timeout-offset` default).
pub const SCRAPE_MARGIN: Duration = Duration::from_millis(500);

/// A probe's whole bound: `--probe-timeout`, and, when Prometheus says
/// how long it waits (`X-Prometheus-Scrape-Timeout-Seconds`, sent with
/// every scrape), that less [`SCRAPE_MARGIN`], so that a failure is
/// recorded instead of the scrape being dropped.
///
/// # Errors
/// The message of a 400 answer: a header that is no number of seconds or
/// leaves no time.
pub fn probe_budget(request: &Request, args: &ExporterArgs) -> Result<Duration, String> {
    const HEADER: &str = "X-Prometheus-Scrape-Timeout-Seconds";
    let own = Duration::from_secs(u64::from(args.probe_timeout));
    let Some(text) = request.header(HEADER) else {
        return Ok(own);
    };
    let scrape = text
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("{HEADER}: {text:?} is not a positive number of seconds"))?;
    let left = scrape.saturating_sub(SCRAPE_MARGIN);
    if left.is_zero() {
        return Err(format!(
            "{HEADER}: {text} s leaves no time for a probe ({:.1} s is kept for the answer)",
            SCRAPE_MARGIN.as_secs_f64()
        ));
    }
    Ok(left.min(own))
}

/// A probe, as its URL asked for it (validated against the limits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePlan {
    /// The server's host.
    pub host: String,
    /// The server's port (the test binaries' default when the URL gives
    /// none).
    pub port: Option<u16>,
    /// The test binary.
    pub test: String,
    /// Message size, bytes.
    pub size: u64,
    /// Measured seconds.
    pub duration: u32,
}

impl ProbePlan {
    /// Reads `target`, `test`, `size` and `duration` from the URL.
    ///
    /// # Errors
    /// The message of a 400 answer naming the parameter at fault.
    pub fn from_request(request: &Request, args: &ExporterArgs) -> Result<Self, String> {
        let target = request
            .param("target")
            .filter(|t| !t.is_empty())
            .ok_or("missing target parameter (target=HOST[:PORT])")?;
        let (host, port) = split_target(target)?;
        let test = request.param("test").unwrap_or("write_bw");
        let spec = probe_spec(test).ok_or_else(|| {
            format!(
                "test={test:?} is not one of {}",
                probe_binaries().join(", ")
            )
        })?;
        let default_size = spec.defaults().size;
        let size = match request.param("size") {
            None => default_size.min(args.max_size),
            Some(s) => crate::args::size_arg(s).map_err(|e| format!("size={s:?}: {e}"))?,
        };
        if size == 0 || size > args.max_size {
            return Err(format!(
                "size={size} is outside 1..={} (--max-size)",
                args.max_size
            ));
        }
        let duration = match request.param("duration") {
            None => 2.min(args.max_duration),
            Some(d) => d
                .parse::<u32>()
                .map_err(|_| format!("duration={d:?} is not a whole number of seconds"))?,
        };
        if duration == 0 || duration > args.max_duration {
            return Err(format!(
                "duration={duration} is outside 1..={} seconds (--max-duration)",
                args.max_duration
            ));
        }
        Ok(Self {
            host,
            port,
            test: test.to_owned(),
            size,
            duration,
        })
    }

    /// The `target` label, and what "one probe at a time per target"
    /// keys on: as given.
    fn target_label(&self) -> String {
        match self.port {
            Some(p) if self.host.contains(':') => format!("[{}]:{p}", self.host),
            Some(p) => format!("{}:{p}", self.host),
            None => self.host.clone(),
        }
    }

    /// The options of the probe's run: its test's flags (`flags`: the
    /// `--probe-arg`s, parsed once as that test binary parses its
    /// command line), then the probe's own typed values — `-D`, `-s`,
    /// `--timeout` (what the probe's bound allows, at most 10 s between
    /// two messages), `--prom` to `prom`, the exporter's `-d`, the
    /// target's port and host — as a quiet client (no table, no banner)
    /// that reports a refused connection at once. Nothing is written out
    /// and parsed back: the options are built as the test binary builds
    /// its own ([`crate::args::Parsed::run_options`]).
    ///
    /// # Errors
    /// A usage error naming the flag: the configuration refuses a value,
    /// or a `--probe-arg` sets what the probe sets.
    fn options(
        &self,
        args: &ExporterArgs,
        flags: &Parsed,
        prom: &Path,
        budget: Duration,
    ) -> Result<RunOptions, UsageError> {
        let spec = probe_spec(&self.test)
            .ok_or_else(|| UsageError(format!("{} is not a test", self.test)))?;
        // What the probe sets, a --probe-arg may not set too (the test's
        // command line would have had the flag twice).
        let mut set_here = vec![
            "-D/--duration",
            "-s/--size",
            "--timeout",
            "--prom",
            "SERVER",
        ];
        if args.device.is_some() {
            set_here.push("-d/--ib-dev");
        }
        if self.port.is_some() {
            set_here.push("-p/--port");
        }
        if let Some(flag) = set_here.iter().find(|f| flags.was_given(f)) {
            return Err(UsageError(format!(
                "--probe-arg: {flag} is set by the probe (its URL or the exporter's own flags); \
                 drop it from the --probe-args"
            )));
        }
        let mut flags = flags.clone();
        let cli = &mut flags.cli;
        cli.run.duration = Some(f64::from(self.duration));
        cli.run.size = Some(self.size);
        cli.conn.timeout = budget.min(Duration::from_secs(10));
        cli.prom = Some(prom.to_path_buf());
        if let Some(d) = &args.device {
            cli.device.ib_dev = Some(d.clone());
        }
        if let Some(p) = self.port {
            cli.conn.port = p;
        }
        cli.conn.server = Some(self.host.clone());
        let mut options = flags.run_options(spec)?.options;
        options.output.stdout_table = false;
        options.local.banner = false;
        options.connection.retry_refused = false;
        Ok(options)
    }
}

/// Each test binary's `--probe-arg`s, parsed once when the exporter
/// starts, as that binary parses its command line (each binary once, in
/// [`IMPLEMENTED`]'s order), or that binary's refusal of them.
#[derive(Debug)]
struct ProbeFlags(Vec<(&'static str, Result<Parsed, UsageError>)>);

impl ProbeFlags {
    fn parse(args: &ExporterArgs) -> Self {
        let parsed = probe_binaries()
            .into_iter()
            .filter_map(|test| {
                let spec = probe_spec(test)?;
                let argv = std::iter::once(test.to_owned()).chain(args.probe_args.iter().cloned());
                Some((test, crate::args::try_parse_from(spec, argv)))
            })
            .collect();
        Self(parsed)
    }

    /// `test`'s flags.
    ///
    /// # Errors
    /// `test`'s refusal of the `--probe-arg`s.
    fn of(&self, test: &str) -> Result<&Parsed, UsageError> {
        match self.0.iter().find(|(t, _)| *t == test) {
            Some((_, Ok(parsed))) => Ok(parsed),
            Some((_, Err(e))) => Err(UsageError(e.0.clone())),
            None => Err(UsageError(format!("{test} is not a test"))),
        }
    }
}

/// The tests (each binary once, in [`IMPLEMENTED`]'s order) whose flag
/// parser refuses a probe's command line with the `--probe-arg`s, and why.
fn probe_arg_refusals(args: &ExporterArgs, flags: &ProbeFlags) -> Vec<(&'static str, String)> {
    let mut refusals: Vec<(&'static str, String)> = Vec::new();
    for spec in IMPLEMENTED {
        let test = spec.binary();
        if refusals.iter().any(|(t, _)| *t == test) {
            continue;
        }
        let plan = ProbePlan {
            host: "localhost".into(),
            port: None,
            test: test.into(),
            size: spec.defaults().size.min(args.max_size),
            duration: 1,
        };
        let budget = Duration::from_secs(u64::from(args.probe_timeout));
        if let Err(e) = flags
            .of(test)
            .and_then(|f| plan.options(args, f, Path::new("probe.prom"), budget))
        {
            refusals.push((test, e.0));
        }
    }
    refusals
}

/// `HOST`, `HOST:PORT`, `[V6]` or `[V6]:PORT`.
fn split_target(target: &str) -> Result<(String, Option<u16>), String> {
    let bad_port = |p: &str| format!("target={target:?}: port {p:?} is not 1..=65535");
    let port_of = |p: &str| match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(bad_port(p)),
    };
    if let Some(rest) = target.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("target={target:?}: no closing ]"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(port_of(p)?),
            None if after.is_empty() => None,
            None => return Err(format!("target={target:?}: junk after ]")),
        };
        return Ok((host.to_owned(), port));
    }
    let valid_host = |h: &str| {
        !h.is_empty()
            && h.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
            && !h.starts_with('-')
    };
    match target.matches(':').count() {
        0 if valid_host(target) => Ok((target.to_owned(), None)),
        1 => {
            let (host, port) = target.split_once(':').unwrap_or((target, ""));
            if !valid_host(host) {
                return Err(format!("target={target:?}: bad host"));
            }
            Ok((host.to_owned(), Some(port_of(port)?)))
        }
        // A bare IPv6 address.
        _ if target.parse::<std::net::Ipv6Addr>().is_ok() => Ok((target.to_owned(), None)),
        _ => Err(format!(
            "target={target:?}: not HOST, HOST:PORT or [IPV6]:PORT"
        )),
    }
}

/// What a probe's test did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOutcome {
    /// The test exited 0 and wrote its results.
    pub success: bool,
    /// Why it failed.
    pub reason: Option<String>,
    /// Its `--prom` text.
    pub results: Option<String>,
}

impl ProbeOutcome {
    fn failed(reason: &str) -> Self {
        Self {
            success: false,
            reason: Some(reason.to_owned()),
            results: None,
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

/// A probe's answer: its test's results and the probe's own gauges.
fn probe_exposition(plan: &ProbePlan, outcome: &ProbeOutcome, took: Duration) -> String {
    use engine::fabric::prom::text::MetricType;
    let mut x = engine::fabric::prom::text::Exposition::new();
    let target = plan.target_label();
    let labels = [("target", target.as_str()), ("test", plan.test.as_str())];
    x.sample(
        "rdmaperf_probe_success",
        "Whether the probe's test ran to the end against the target (1) or not (0).",
        MetricType::Gauge,
        &[],
        if outcome.success { 1.0 } else { 0.0 },
    );
    x.sample(
        "rdmaperf_probe_duration_seconds",
        "How long the probe took, set-up included, seconds.",
        MetricType::Gauge,
        &[],
        took.as_secs_f64(),
    );
    x.sample(
        "rdmaperf_probe_info",
        "What the probe ran: target, test, size and measured seconds (always 1).",
        MetricType::Gauge,
        &[
            labels[0],
            labels[1],
            ("size_bytes", &plan.size.to_string()),
            ("duration_seconds", &plan.duration.to_string()),
        ],
        1.0,
    );
    let mut text = String::new();
    if let Some(reason) = &outcome.reason {
        text.push_str(&format!("# probe failed: {}\n", reason.replace('\n', " ")));
    }
    text.push_str(&x.render());
    if let Some(results) = &outcome.results {
        text.push_str(results);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: ExporterArgs,
    }

    fn args(extra: &[&str]) -> ExporterArgs {
        let mut v = vec!["x", "--listen", "127.0.0.1:1"];
        v.extend_from_slice(extra);
        Wrap::parse_from(v).args
    }

    fn request(query: &str) -> Request {
        http::parse_request_line(&format!("GET /probe?{query} HTTP/1.1")).unwrap()
    }

    /// The probe's options as the exporter builds them (a 30 s budget,
    /// results to /tmp/p.prom).
    fn typed(plan: &ProbePlan, a: &ExporterArgs) -> Result<RunOptions, UsageError> {
        ProbeFlags::parse(a)
            .of(&plan.test)
            .and_then(|f| plan.options(a, f, Path::new("/tmp/p.prom"), Duration::from_secs(30)))
    }

    /// The oracle: the options as they were built before they were
    /// typed, by writing the probe's command line and parsing it back as
    /// its test binary would. Kept (test code only) to show that the
    /// typed [`ProbePlan::options`] builds the same run.
    fn argv_options(plan: &ProbePlan, a: &ExporterArgs) -> Result<RunOptions, UsageError> {
        let spec = probe_spec(&plan.test).unwrap();
        let peer_timeout = Duration::from_secs(30)
            .min(Duration::from_secs(10))
            .as_secs_f64();
        let mut v = vec![
            plan.test.clone(),
            "-D".to_owned(),
            plan.duration.to_string(),
            "-s".to_owned(),
            plan.size.to_string(),
            "--timeout".to_owned(),
            peer_timeout.to_string(),
            "--prom".to_owned(),
            "/tmp/p.prom".to_owned(),
        ];
        if let Some(d) = &a.device {
            v.extend(["-d".to_owned(), d.clone()]);
        }
        if let Some(p) = plan.port {
            v.extend(["-p".to_owned(), p.to_string()]);
        }
        v.extend(a.probe_args.iter().cloned());
        v.push(plan.host.clone());
        let mut options = crate::args::try_parse_from(spec, v)?
            .run_options(spec)?
            .options;
        options.output.stdout_table = false;
        options.local.banner = false;
        options.connection.retry_refused = false;
        Ok(options)
    }

    #[test]
    fn typed_probe_options_equal_what_the_command_line_built() {
        let exporters: [&[&str]; 7] = [
            &[],
            &["-d", "mlx5_0"],
            &["-d", "rxe0", "--probe-arg=-x", "--probe-arg", "3"],
            &[
                "--probe-arg=-q",
                "--probe-arg=4",
                "--probe-arg=--report_gbits",
            ],
            &["--probe-arg=-R", "--probe-arg=-u", "--probe-arg=18"],
            &["--probe-arg=-I", "--probe-arg=64"],
            // Refused by the configuration, naming the flag.
            &["--probe-arg=-q", "--probe-arg=0"],
        ];
        let queries = [
            "target=node1",
            "target=node1:18600&test=read_lat&size=64&duration=3",
            "target=[fe80::1]:7&test=write_bw&size=1M&duration=10",
            "target=10.0.0.2&test=send_bw&size=4096&duration=1",
            "target=n&test=atomic_bw",
            "target=n&test=send_lat&duration=4",
            "target=n&test=read_bw&size=8",
        ];
        let mut compared = (0, 0);
        for extra in exporters {
            let mut flags = vec!["--max-size", "8M", "--max-duration", "10"];
            flags.extend_from_slice(extra);
            let a = args(&flags);
            for query in queries {
                let plan = ProbePlan::from_request(&request(query), &a).unwrap();
                let case = format!("{extra:?} {query}");
                match (typed(&plan, &a), argv_options(&plan, &a)) {
                    (Ok(typed), Ok(argv)) => {
                        assert_eq!(typed, argv, "{case}");
                        compared.0 += 1;
                    }
                    (Err(typed), Err(argv)) => {
                        assert_eq!(typed.0, argv.0, "{case}");
                        compared.1 += 1;
                    }
                    (typed, argv) => panic!("{case}: typed {typed:?}, argv {argv:?}"),
                }
            }
        }
        assert!(compared.0 > 20 && compared.1 > 3, "{compared:?}");
    }

    #[test]
    fn targets_are_host_host_port_or_bracketed_ipv6() {
        assert_eq!(split_target("node1"), Ok(("node1".into(), None)));
        assert_eq!(
            split_target("10.0.0.2:18515"),
            Ok(("10.0.0.2".into(), Some(18515)))
        );
        assert_eq!(split_target("[fe80::1]:7"), Ok(("fe80::1".into(), Some(7))));
        assert_eq!(split_target("fe80::1"), Ok(("fe80::1".into(), None)));
        for bad in [
            "", "-d", "a:0", "a:70000", "a b", "[fe80::1", "[::1]x", "a;rm",
        ] {
            assert!(split_target(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_probe_runs_the_named_test_as_a_bounded_client_with_its_prom_file() {
        let a = args(&["-d", "mlx5_0", "--probe-arg=-x", "--probe-arg", "3"]);
        let plan = ProbePlan::from_request(
            &request("target=node1:18600&test=read_lat&size=64&duration=3"),
            &a,
        )
        .unwrap();
        assert_eq!(plan.test, "read_lat");
        // In process: the test's own flags, a quiet client that reports a
        // refusal at once.
        let o = typed(&plan, &a).unwrap();
        assert_eq!(o.spec, TestSpec::READ_LAT);
        assert!(
            matches!(&o.role, crate::options::RoleOptions::Client { server, .. } if server == "node1")
        );
        assert_eq!(o.device().name.as_deref(), Some("mlx5_0"));
        assert_eq!(o.device().gid_index, Some(3));
        assert_eq!(o.connection.port, 18600);
        assert_eq!(o.connection.timeout, Duration::from_secs(10));
        assert!(!o.connection.retry_refused && !o.output.stdout_table && !o.local.banner);
        assert_eq!(o.output.prom.as_deref(), Some(Path::new("/tmp/p.prom")));
        // A --probe-arg the test refuses is a usage error, not an exit.
        let bad = args(&["--probe-arg=--no-such-flag"]);
        assert!(typed(&plan, &bad).is_err());
        // One the probe sets is refused, naming it.
        let twice = args(&["--probe-arg=-s", "--probe-arg=64"]);
        let e = typed(&plan, &twice).unwrap_err();
        assert!(
            e.0.starts_with("--probe-arg: -s/--size is set by the probe"),
            "{e}"
        );
        // Defaults: write_bw, 64 KiB, 2 s; the latency tests 2 B.
        let plan = ProbePlan::from_request(&request("target=n"), &a).unwrap();
        assert_eq!(
            (plan.test.as_str(), plan.size, plan.duration),
            ("write_bw", 65536, 2)
        );
        let plan = ProbePlan::from_request(&request("target=n&test=send_lat"), &a).unwrap();
        assert_eq!(plan.size, 2);
        let plan = ProbePlan::from_request(&request("target=n&test=atomic_bw"), &a).unwrap();
        assert_eq!(plan.size, 8);
        // Every test binary may be probed, and is named once when the
        // test is not one of them.
        let err = ProbePlan::from_request(&request("target=n&test=ib_write_bw"), &a).unwrap_err();
        let (_, listed) = err.split_once("is not one of ").unwrap();
        let mut listed: Vec<&str> = listed.split(", ").collect();
        listed.sort_unstable();
        assert_eq!(
            listed,
            [
                "atomic_bw",
                "read_bw",
                "read_lat",
                "send_bw",
                "send_lat",
                "write_bw",
                "write_lat"
            ]
        );
    }

    #[test]
    fn a_probe_is_bounded_by_the_scrape_timeout_less_the_margin_and_its_own() {
        let a = args(&["--probe-timeout", "30"]);
        let with = |h: &str| {
            let head = format!("GET /probe?target=n HTTP/1.1\r\n{h}\r\n");
            probe_budget(&http::parse_request_line(&head).unwrap(), &a)
        };
        // Prometheus' default scrape timeout: 10 s, less 0.5 s.
        assert_eq!(
            with("X-Prometheus-Scrape-Timeout-Seconds: 10"),
            Ok(Duration::from_millis(9500))
        );
        assert_eq!(
            with("x-prometheus-scrape-timeout-seconds: 2.25"),
            Ok(Duration::from_millis(1750))
        );
        // A longer scrape timeout: --probe-timeout still bounds it.
        assert_eq!(
            with("X-Prometheus-Scrape-Timeout-Seconds: 120"),
            Ok(Duration::from_secs(30))
        );
        // No header (curl, a browser): --probe-timeout.
        assert_eq!(with("Accept: */*"), Ok(Duration::from_secs(30)));
        for bad in ["0", "0.5", "-3", "ten", "NaN", "inf", "1e400"] {
            let err = with(&format!("X-Prometheus-Scrape-Timeout-Seconds: {bad}")).unwrap_err();
            assert!(
                err.starts_with("X-Prometheus-Scrape-Timeout-Seconds: "),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn no_url_asks_for_more_than_the_limits() {
        let a = args(&["--max-size", "4096", "--max-duration", "3"]);
        for (query, named) in [
            ("target=n&size=4097", "size"),
            ("target=n&size=0", "size"),
            ("target=n&size=1G", "size"),
            ("target=n&duration=4", "duration"),
            ("target=n&duration=-1", "duration"),
            ("target=n&test=ib_write_bw", "test"),
            ("test=write_bw", "target"),
        ] {
            let err = ProbePlan::from_request(&request(query), &a).unwrap_err();
            assert!(err.contains(named), "{query}: {err}");
        }
    }
}
