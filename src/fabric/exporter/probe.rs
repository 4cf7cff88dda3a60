//! What a `/probe` is: its URL checked against the exporter's limits
//! ([`ProbePlan`], [`probe_budget`]), the test options it runs
//! ([`ProbePlan::options`], over the `--probe-arg`s parsed once:
//! `ProbeFlags`), and its answer ([`ProbeOutcome`], `probe_exposition`).
//! Running it (its slot, its thread, its bound) is the exporter's, in
//! [`super`].

use std::path::Path;
use std::time::Duration;

use engine::bench::spec::{IMPLEMENTED, TestSpec};

use super::ExporterArgs;
use super::http::Request;
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
    pub(super) fn target_label(&self) -> String {
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
    pub(super) fn options(
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
pub(super) struct ProbeFlags(Vec<(&'static str, Result<Parsed, UsageError>)>);

impl ProbeFlags {
    pub(super) fn parse(args: &ExporterArgs) -> Self {
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
    pub(super) fn of(&self, test: &str) -> Result<&Parsed, UsageError> {
        match self.0.iter().find(|(t, _)| *t == test) {
            Some((_, Ok(parsed))) => Ok(parsed),
            Some((_, Err(e))) => Err(UsageError(e.0.clone())),
            None => Err(UsageError(format!("{test} is not a test"))),
        }
    }
}

/// The tests (each binary once, in [`IMPLEMENTED`]'s order) whose flag
/// parser refuses a probe's command line with the `--probe-arg`s, and why.
pub(super) fn probe_arg_refusals(
    args: &ExporterArgs,
    flags: &ProbeFlags,
) -> Vec<(&'static str, String)> {
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
    pub(super) fn failed(reason: &str) -> Self {
        Self {
            success: false,
            reason: Some(reason.to_owned()),
            results: None,
        }
    }
}

/// A probe's answer: its test's results and the probe's own gauges.
pub(super) fn probe_exposition(plan: &ProbePlan, outcome: &ProbeOutcome, took: Duration) -> String {
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
    use crate::fabric::http;
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
