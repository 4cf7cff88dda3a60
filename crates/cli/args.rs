//! One command line for every test binary. The flags are defined once
//! ([`Cli`]); each [`TestSpec`] hides from `--help` the flags that do not
//! apply to it and refuses them (exit 2, naming the flag) when given, and
//! its defaults fill what the user left out.

use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser};
use engine::clock::ClockChoice;
use engine::config::{BwConfig, DurationMode, TestConfig};
use engine::lat::{LatConfig, Percentile, parse_max_latency};
use engine::link::{self, ExpectRate};
use engine::spec::{Metric, TestSpec};

use crate::UsageError;

/// Flags that select a device and port, with perftest's names.
#[derive(Debug, Clone, Args)]
pub struct DeviceArgs {
    /// RDMA device to use (default: all when listing, the first otherwise).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEVICE")]
    pub ib_dev: Option<String>,
    /// Port of the device (1-based).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT",
          value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: Option<u8>,
}

/// Flags of the out-of-band connection.
#[derive(Debug, Clone, Args)]
pub struct ConnectionArgs {
    /// Server to connect to; without it this side is the server.
    #[arg(value_name = "SERVER")]
    pub server: Option<String>,
    /// GID index (default: chosen as perftest does: RoCE v2 and IPv4 first, link-local last).
    #[arg(short = 'x', long = "gid-index", value_name = "INDEX")]
    pub gid_index: Option<u32>,
    /// TCP port of the out-of-band channel.
    #[arg(short = 'p', long = "port", default_value_t = engine::config::DEFAULT_PORT)]
    pub port: u16,
    /// Address the server listens on.
    #[arg(long = "bind", value_name = "ADDR", default_value = "0.0.0.0")]
    pub bind: String,
    /// Bound on every wait for the peer, seconds.
    #[arg(long = "timeout", value_name = "SECONDS", default_value = "15",
          value_parser = seconds_arg)]
    pub timeout: Duration,
    /// How long the server waits for a client, seconds.
    #[arg(long = "accept-timeout", value_name = "SECONDS", default_value = "300",
          value_parser = seconds_arg)]
    pub accept_timeout: Duration,
    /// Server: serve clients one after another until stopped (each session's
    /// resources are freed before the next; a failed session does not end
    /// the server); --accept-timeout no longer applies.
    #[arg(long = "persistent")]
    pub persistent: bool,
    /// QP ACK timeout exponent: 4.096 us x 2^N before a retransmit (perftest's -u; local to this side).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14,
          value_parser = clap::value_parser!(u8).range(0..=31))]
    pub qp_timeout: u8,
}

/// Flags that say what to run (the client's count).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Message size in bytes (suffixes K, M allowed).
    #[arg(short = 's', long = "size", value_parser = size_arg)]
    pub size: Option<u64>,
    /// Run all sizes from 2 B to 8 MiB.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Iterations per size.
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run for this many seconds per size instead of a count.
    #[arg(short = 'D', long = "duration", value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Warm-up and cool-down margin of duration mode, seconds.
    #[arg(short = 'f', long = "margin", default_value_t = 2.0)]
    pub margin: f64,
    /// Path MTU in bytes (default: the smaller active MTU of both ports).
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
}

/// Every flag of every test binary; [`parse`] shows and accepts only
/// those of one test.
#[derive(Debug, Parser)]
#[command(version, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub conn: ConnectionArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Number of queue pairs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Worker threads the QPs are spread over.
    #[arg(long = "threads", default_value_t = 1)]
    pub threads: u32,
    /// Send queue depth per QP.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: u32,
    /// Request a completion every N work requests (default 100, 1 above 8 KiB, at most the tx depth).
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// Work requests chained per post.
    #[arg(short = 'l', long = "post-list", default_value_t = 1)]
    pub post_list: u32,
    /// Send messages up to this many bytes inline.
    #[arg(short = 'I', long = "inline-size")]
    pub inline_size: Option<u32>,
    /// Outstanding RDMA READs per QP (default: the device's max_qp_rd_atom, as perftest).
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u32>,
    /// Both sides run the test at once; reports the sum.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// Report Gb/s (10^9 bit/s) instead of MiB/s.
    #[arg(long = "report_gbits", visible_alias = "report-gbits")]
    pub report_gbits: bool,
    /// Add the CPU_Util[%] column (always in JSON).
    #[arg(long = "cpu_util", visible_alias = "cpu-util")]
    pub cpu_util: bool,
    /// Most memory the server registers for a client's test.
    #[arg(long = "max-mem", value_name = "BYTES", default_value = "1G", value_parser = size_arg)]
    pub max_mem: u64,
    /// Write JSON lines (one object per size) to FILE, or to stdout instead of the table with `-`.
    #[arg(long = "json", value_name = "FILE|-")]
    pub json: Option<String>,
    /// Expected link rate: auto (the port's negotiated rate), 200, 400, or any Gb/s.
    #[arg(long = "expect-rate", value_name = "auto|200|400|GBPS")]
    pub expect_rate: Option<ExpectRate>,
    /// Fraction of the expected rate the average bandwidth must reach.
    #[arg(long = "min-efficiency", default_value = "0.9", value_parser = link::parse_efficiency)]
    pub min_efficiency: f64,
    /// Print every sample (usec, as the table reports them) after the table.
    #[arg(short = 'H', long = "report-histogram")]
    pub report_histogram: bool,
    /// Include the HdrHistogram (V2, base64) in each JSON object.
    #[arg(long = "json-histogram")]
    pub json_histogram: bool,
    /// Fail (exit 3) when the chosen percentile exceeds this many usec.
    #[arg(long = "max-latency", value_name = "USEC", value_parser = parse_max_latency)]
    pub max_latency: Option<f64>,
    /// Which figure --max-latency judges: median, p90, p99, p99.9, max, avg.
    #[arg(long = "percentile", default_value = "median")]
    pub percentile: Percentile,
    /// Clock for the samples: tsc (the CPU's counter, calibrated against
    /// CLOCK_MONOTONIC), monotonic, or auto (tsc when the CPU advertises an
    /// invariant one: constant_tsc and nonstop_tsc).
    #[arg(
        long = "clock",
        value_name = "auto|tsc|monotonic",
        default_value = "auto"
    )]
    pub clock: ClockChoice,
    /// Root of sysfs (for tests on fixture trees).
    #[arg(long = "sysfs-root", default_value = "/sys", hide = true)]
    pub sysfs_root: PathBuf,
    /// List devices, their ports and GIDs, then exit.
    #[arg(long = "list-devices")]
    pub list_devices: bool,
}

/// Flags (by argument id) of the bandwidth tests only.
const BW_ONLY: [&str; 10] = [
    "qps",
    "threads",
    "tx_depth",
    "cq_mod",
    "post_list",
    "bidirectional",
    "report_gbits",
    "cpu_util",
    "expect_rate",
    "min_efficiency",
];
/// Flags of the latency tests only.
const LAT_ONLY: [&str; 5] = [
    "report_histogram",
    "json_histogram",
    "max_latency",
    "percentile",
    "clock",
];
/// Flags that configure the test (the client's); a server ignores them.
const TEST_FLAGS: [&str; 14] = [
    "size",
    "all",
    "iters",
    "duration",
    "mtu",
    "qps",
    "threads",
    "tx_depth",
    "cq_mod",
    "post_list",
    "inline_size",
    "outs",
    "bidirectional",
    "expect_rate",
];

/// Whether the flag with argument id `id` belongs to `spec`'s test.
fn applies(spec: TestSpec, id: &str) -> bool {
    if BW_ONLY.contains(&id) {
        return spec.metric == Metric::Bw;
    }
    if LAT_ONLY.contains(&id) {
        return spec.metric == Metric::Lat;
    }
    match id {
        // perftest: "Inline feature not available on READ/Atomic verbs".
        "inline_size" => !spec.data_to_initiator(),
        // perftest: "Setting Outstanding reads only available on READ verb".
        "outs" => spec.uses_outstanding_reads(),
        _ => true,
    }
}

/// The `clap` command of `spec`'s binary: its name and about line, its
/// defaults in the help, the flags of other tests hidden.
pub fn command(spec: TestSpec) -> clap::Command {
    let d = spec.defaults();
    let mut cmd = Cli::command()
        .name(spec.name())
        .about(format!(
            "{} ({} equivalent). Run without SERVER on one host (the server), \
             with SERVER on the other (the client); the client's flags configure both sides.",
            spec.title(),
            perftest_name(spec)
        ))
        .mut_arg("size", |a| {
            a.help(format!(
                "Message size in bytes (suffixes K, M allowed; default {})",
                d.size
            ))
        })
        .mut_arg("iters", |a| {
            let what = match spec.metric {
                Metric::Bw => "messages per QP",
                Metric::Lat => "operations",
            };
            a.help(format!("Iterations per size ({what}; default {})", d.iters))
        })
        .mut_arg("inline_size", |a| {
            a.help(match spec.metric {
                Metric::Lat => format!(
                    "Send messages up to this size inline (default {}, or 0 when the device refuses)",
                    d.inline
                ),
                Metric::Bw => format!(
                    "Send messages up to this many bytes inline (default {})",
                    d.inline
                ),
            })
        });
    let ids: Vec<String> = cmd
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    for id in ids {
        if !applies(spec, &id) {
            cmd = cmd.mut_arg(id, |a| a.hide(true));
        }
    }
    cmd
}

fn perftest_name(spec: TestSpec) -> String {
    format!("ib_{}", spec.name())
}

/// How a flag reads in messages, e.g. `-Q/--cq-mod`.
fn flag_name(cmd: &clap::Command, id: &str) -> String {
    let Some(arg) = cmd.get_arguments().find(|a| a.get_id() == id) else {
        return id.to_owned();
    };
    match (arg.get_short(), arg.get_long()) {
        (Some(s), Some(l)) => format!("-{s}/--{l}"),
        (None, Some(l)) => format!("--{l}"),
        (Some(s), None) => format!("-{s}"),
        (None, None) => id.to_owned(),
    }
}

/// The parsed command line of one test binary, with the flags the user
/// typed for the test.
#[derive(Debug)]
pub struct Parsed {
    /// Every flag's value (defaults included).
    pub cli: Cli,
    /// The test-configuring flags given on the command line, as
    /// `-s/--size` (a server warns that it ignores them).
    pub test_flags_given: Vec<String>,
}

/// Parses the process's arguments for `spec` (clap's own errors and
/// `--help` exit here, with code 2 and 0).
///
/// # Errors
/// A usage error naming a flag that `spec`'s test does not have.
pub fn parse(spec: TestSpec) -> Result<Parsed, UsageError> {
    parse_from(spec, std::env::args_os())
}

/// [`parse`] over the given arguments (the first is the program name).
///
/// # Errors
/// As [`parse`].
pub fn parse_from(
    spec: TestSpec,
    args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
) -> Result<Parsed, UsageError> {
    let cmd = command(spec);
    let matches = cmd.clone().get_matches_from(args);
    let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    for a in cmd.get_arguments() {
        let id = a.get_id().as_str();
        if given(id) && !applies(spec, id) {
            return Err(UsageError(format!(
                "{}: not an option of {} ({} has no such flag either)",
                flag_name(&cmd, id),
                spec.name(),
                perftest_name(spec)
            )));
        }
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let test_flags_given = TEST_FLAGS
        .iter()
        .filter(|id| given(id))
        .map(|id| flag_name(&cmd, id))
        .collect();
    Ok(Parsed {
        cli,
        test_flags_given,
    })
}

impl Cli {
    /// The sizes to run: the `-a` sweep or one size (`default` without
    /// `-s`).
    ///
    /// # Errors
    /// A usage error when `-a` and `-s` are both given.
    fn sizes(&self, default: u64) -> Result<Vec<u64>, UsageError> {
        if self.run.all && self.run.size.is_some() {
            return Err(UsageError(
                "-a/--all and -s/--size exclude each other".into(),
            ));
        }
        Ok(if self.run.all {
            engine::config::sweep_sizes()
        } else {
            vec![self.run.size.unwrap_or(default)]
        })
    }

    fn duration_mode(&self) -> Option<DurationMode> {
        self.run.duration.map(|seconds| DurationMode {
            seconds,
            margin: self.run.margin,
        })
    }

    /// The bandwidth configuration the flags describe (client side); `outs`
    /// is `-o` or 0 (the device's maximum, resolved once it is open).
    ///
    /// # Errors
    /// A usage error naming the flag.
    pub fn bw_config(&self, spec: TestSpec) -> Result<BwConfig, UsageError> {
        let d = spec.defaults();
        let sizes = self.sizes(d.size)?;
        let tx_depth = self.tx_depth;
        // perftest: 100 by default, clamped to the tx depth; 1 for sizes
        // above 8 KiB unless -a or an explicit -Q; the post list with -l.
        let cq_mod = match self.cq_mod {
            Some(q) => q,
            None if self.post_list > 1 => self.post_list.min(tx_depth.max(1)),
            None if !self.run.all && sizes[0] > 8192 => 1,
            None => 100.min(tx_depth.max(1)),
        };
        let cfg = BwConfig {
            sizes,
            iters: self.run.iters.unwrap_or(d.iters),
            duration: self.duration_mode(),
            qps: self.qps,
            threads: self.threads,
            tx_depth,
            cq_mod,
            post_list: self.post_list,
            inline_size: self.inline_size.unwrap_or(d.inline),
            bidirectional: self.bidirectional,
            mtu: self.run.mtu,
            outs: self.outs.unwrap_or(0),
        };
        self.checked(spec, cfg)
    }

    /// The latency configuration the flags describe (client side).
    ///
    /// # Errors
    /// A usage error naming the flag.
    pub fn lat_config(&self, spec: TestSpec) -> Result<LatConfig, UsageError> {
        let d = spec.defaults();
        let cfg = LatConfig {
            sizes: self.sizes(d.size)?,
            iters: self.run.iters.unwrap_or(d.iters),
            duration: self.duration_mode(),
            inline_size: self.inline_size.unwrap_or(d.inline),
            mtu: self.run.mtu,
            outs: self.outs.unwrap_or(0),
        };
        self.checked(spec, cfg)
    }

    /// `cfg` once valid, and `-o` (when given) at least 1.
    fn checked<C: TestConfig>(&self, spec: TestSpec, cfg: C) -> Result<C, UsageError> {
        cfg.validate().map_err(|e| UsageError(e.to_string()))?;
        if spec.uses_outstanding_reads() && self.outs == Some(0) {
            return Err(UsageError("-o/--outs: at least 1 outstanding read".into()));
        }
        Ok(cfg)
    }
}

/// Parses a byte count flag value (`65536`, `64K`, `1M`).
///
/// # Errors
/// A message naming the text.
pub fn size_arg(s: &str) -> Result<u64, String> {
    engine::config::parse_size(s)
}

/// Parses a positive number of seconds.
///
/// # Errors
/// A message naming the text.
pub fn seconds_arg(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("{s:?} must be a positive number of seconds"));
    }
    Duration::try_from_secs_f64(v).map_err(|_| format!("{s:?} is too many seconds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(spec: TestSpec, args: &[&str]) -> Result<Parsed, UsageError> {
        parse_from(
            spec,
            std::iter::once(spec.name()).chain(args.iter().copied()),
        )
    }

    #[test]
    fn flags_of_other_tests_are_refused_naming_the_flag() {
        let e = parse_args(TestSpec::READ_LAT, &["-Q", "4", "host"]).unwrap_err();
        assert!(
            e.0.starts_with("-Q/--cq-mod: not an option of read_lat"),
            "{}",
            e.0
        );
        let e = parse_args(TestSpec::READ_BW, &["-I", "64", "host"]).unwrap_err();
        assert!(e.0.starts_with("-I/--inline-size:"), "{}", e.0);
        let e = parse_args(TestSpec::WRITE_BW, &["-o", "4", "host"]).unwrap_err();
        assert!(e.0.starts_with("-o/--outs:"), "{}", e.0);
        let e = parse_args(TestSpec::WRITE_BW, &["--percentile", "p99"]).unwrap_err();
        assert!(e.0.starts_with("--percentile:"), "{}", e.0);
        assert!(parse_args(TestSpec::READ_BW, &["-o", "4", "-q", "2", "host"]).is_ok());
    }

    #[test]
    fn help_shows_only_the_tests_flags() {
        let help = command(TestSpec::READ_LAT).render_help().to_string();
        assert!(help.contains("--outs") && help.contains("--max-latency"));
        assert!(!help.contains("--cq-mod") && !help.contains("--inline-size"));
        let help = command(TestSpec::WRITE_BW).render_help().to_string();
        assert!(help.contains("--cq-mod") && help.contains("--inline-size"));
        assert!(!help.contains("--outs") && !help.contains("--percentile"));
        assert!(help.contains("RDMA_Write BW Test (ib_write_bw equivalent)"));
    }

    #[test]
    fn defaults_come_from_the_spec() {
        let p = parse_args(TestSpec::READ_BW, &["host"]).unwrap();
        let c = p.cli.bw_config(TestSpec::READ_BW).unwrap();
        assert_eq!(
            (c.sizes[0], c.iters, c.cq_mod, c.inline_size),
            (65536, 1000, 1, 0)
        );
        let p = parse_args(TestSpec::WRITE_BW, &["host"]).unwrap();
        assert_eq!(p.cli.bw_config(TestSpec::WRITE_BW).unwrap().iters, 5000);
        let p = parse_args(TestSpec::WRITE_LAT, &["-s", "64", "host"]).unwrap();
        let c = p.cli.lat_config(TestSpec::WRITE_LAT).unwrap();
        assert_eq!((c.sizes[0], c.iters, c.inline_size), (64, 1000, 220));
        assert_eq!(p.test_flags_given, vec!["-s/--size".to_owned()]);
        let e = parse_args(TestSpec::READ_BW, &["-o", "0", "host"])
            .unwrap()
            .cli
            .bw_config(TestSpec::READ_BW)
            .unwrap_err();
        assert!(e.0.starts_with("-o/--outs"), "{}", e.0);
    }

    #[test]
    fn seconds_beyond_a_duration_are_refused_not_a_panic() {
        assert!(seconds_arg("1e20").unwrap_err().contains("too many"));
        assert!(seconds_arg("0").is_err() && seconds_arg("x").is_err());
    }
}
