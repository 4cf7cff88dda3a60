//! One command line for every test binary. The flags are defined once
//! ([`Cli`]); each [`TestSpec`] hides from `--help` the flags that do not
//! apply to it and refuses them (exit 2, naming the flag) when given, and
//! its defaults fill what the user left out.

use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser};
use engine::bench::clock::ClockChoice;
use engine::bench::config::{BwConfig, ConfigError, LatConfig};
use engine::bench::request::{Adjusted, ConfigRequest, configure, refuse_beside_rdma_cm};
use engine::bench::spec::{Metric, TestSpec, Verb};
use engine::fabric::link::{self, ExpectRate};
use engine::format::perftest_json::OutputFigure;
use engine::format::table::Unit;
use engine::results::lat::{Percentile, parse_max_latency};

use crate::exit::UsageError;
use crate::options::{
    ConnectionOptions, DeviceSelection, LocalOptions, OutputPlan, RoleOptions, RunOptions,
    VerdictPlan,
};

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
    #[arg(short = 'p', long = "port", default_value_t = engine::bench::config::DEFAULT_PORT)]
    pub port: u16,
    /// Address the server listens on.
    #[arg(long = "bind", value_name = "ADDR", default_value = crate::options::DEFAULT_BIND)]
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
    /// P_Key index of this side's QPs (local to this side; beyond the
    /// port's table, 0 with a note, as perftest).
    #[arg(long = "pkey_index", value_name = "INDEX", default_value_t = 0)]
    pub pkey_index: u16,
    /// Connect the QPs through the RDMA connection manager (rdma_cm), to
    /// the server's address (perftest's -R; needed on iWARP). The control
    /// channel stays on TCP port -p; device, port and GID come from the
    /// route to the address.
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// QP ACK timeout exponent: 4.096 us x 2^N before a retransmit (perftest's -u; local to this side).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = crate::options::DEFAULT_QP_TIMEOUT,
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
    /// Warm-up and cool-down margin of duration mode, seconds (default: a
    /// quarter of the duration, in whole seconds, as perftest).
    #[arg(short = 'f', long = "margin", value_name = "SECONDS")]
    pub margin: Option<f64>,
    /// Path MTU in bytes (default: the smaller active MTU of both ports).
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// Service level of every QP, both sides.
    #[arg(short = 'S', long = "sl", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=15))]
    pub sl: u8,
    /// GRH traffic class of every QP, both sides (on RoCE the DSCP and ECN
    /// bits, DSCP << 2: what NCCL_IB_TC sets; needs a GRH, always on RoCE).
    #[arg(long = "tclass", value_name = "TCLASS", default_value_t = 0)]
    pub tclass: u8,
    /// GRH flow labels, comma-separated, taken by the QPs round-robin.
    #[arg(long = "flow_label", value_name = "FL[,FL...]", value_delimiter = ',')]
    pub flow_label: Vec<u32>,
}

/// Every flag of every test binary; [`parse`] shows and accepts only
/// those of one test.
#[derive(Debug, Clone, Parser)]
#[command(version, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub conn: ConnectionArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Do not measure the peak: BW peak shows 0.00 (as perftest, which also
    /// shows 0.00 with -D and above 20000 iterations).
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Number of queue pairs.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Worker threads the QPs are spread over.
    #[arg(long = "threads", default_value_t = 1)]
    pub threads: u32,
    /// Send queue depth per QP (its default is the test's: [`command`]).
    #[arg(short = 't', long = "tx-depth", default_value = "0")]
    pub tx_depth: u32,
    /// Request a completion every N work requests (default 100, 1 above 8 KiB, at most the tx depth).
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// Work requests chained per post.
    #[arg(
        short = 'l',
        long = "post-list",
        visible_alias = "post_list",
        default_value_t = 1
    )]
    pub post_list: u32,
    /// Send messages up to this many bytes inline.
    #[arg(short = 'I', long = "inline-size", visible_alias = "inline_size")]
    pub inline_size: Option<u32>,
    /// Outstanding RDMA READs per QP (default: the device's max_qp_rd_atom, as perftest).
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u32>,
    /// Both sides run the test at once; reports the sum.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// Receives kept posted per QP by the receiving side (default 512, at
    /// most the iterations, made even: perftest's rule).
    #[arg(short = 'r', long = "rx-depth", value_name = "DEPTH")]
    pub rx_depth: Option<u32>,
    /// Atomic operation: FETCH_AND_ADD (default) or CMP_AND_SWAP.
    #[arg(short = 'A', long = "atomic_type", value_name = "TYPE", value_parser = atomic_type_arg)]
    pub atomic_type: Option<engine::bench::spec::Verb>,
    /// RDMA WRITE with immediate instead of RDMA WRITE: each write consumes
    /// a receive on the server, which counts them.
    #[arg(long = "write_with_imm")]
    pub write_with_imm: bool,
    /// Report Gb/s (10^9 bit/s) instead of MiB/s.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Add the CPU_Util[%] column (always in JSON).
    #[arg(long = "cpu_util")]
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
    #[arg(
        short = 'H',
        long = "report-histogram",
        visible_alias = "report-histogrm"
    )]
    pub report_histogram: bool,
    /// Print every sample in the order measured, perftest's way (`#, usec`
    /// then `N, VALUE`), after the table.
    #[arg(short = 'U', long = "report-unsorted")]
    pub report_unsorted: bool,
    /// Compute the table's figures as perftest does, to compare numbers
    /// with it: the two largest samples left out, t_max the second largest
    /// (see docs/perftest-compat.md). Default: every sample counts.
    #[arg(long = "perftest-stats")]
    pub perftest_stats: bool,
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
    /// Fail (exit 1, as perftest) unless some size's average bandwidth
    /// reaches this, in the table's unit (MiB/s, or Gb/s with --report_gbits).
    #[arg(short = 'w', long = "limit_bw", value_name = "BW", value_parser = limit_arg)]
    pub limit_bw: Option<f64>,
    /// Fail (exit 1) unless some size's message rate reaches this, Mpps
    /// (perftest checks it only together with -w; rdmaperf on its own too).
    #[arg(short = 'y', long = "limit_msgrate", value_name = "MPPS", value_parser = limit_arg)]
    pub limit_msgrate: Option<f64>,
    /// Print only this figure, one number per size, instead of the table:
    /// bandwidth or message_rate (bandwidth tests), latency (latency tests).
    #[arg(long = "output", value_name = "bandwidth|message_rate|latency")]
    pub output: Option<OutputFigure>,
    /// Also write perftest's JSON report (its keys and layout; the last
    /// size, as perftest) to --out_json_file.
    #[arg(long = "out_json")]
    pub out_json: bool,
    /// The file of --out_json.
    #[arg(long = "out_json_file", value_name = "FILE", default_value = engine::format::perftest_json::DEFAULT_FILE)]
    pub out_json_file: PathBuf,
    /// Also write the results, the verdicts and this side's port counters
    /// as Prometheus text to FILE, rewritten atomically after every size
    /// (for node_exporter's textfile collector).
    #[arg(long = "prom", value_name = "FILE")]
    pub prom: Option<PathBuf>,
    /// After each size, print the change of these port counters (paths
    /// under /sys/class/infiniband/DEV/ports/PORT, comma-separated), e.g.
    /// counters/port_xmit_data,hw_counters/out_of_buffer.
    #[arg(short = 'W', long = "report-counters", value_name = "LIST")]
    pub report_counters: Option<String>,
    /// With -b, also print this side's and the peer's results in separate
    /// tables after the summed one.
    #[arg(long = "report-both")]
    pub report_both: bool,
    /// Run on these CPUs: 0, 0,1,2, 0-3 or 0-3,8,12-15 (default: the CPUs
    /// of the NIC's NUMA node, as perftest).
    #[arg(long = "pin_cores", value_name = "LIST", value_parser = cpu_list_arg)]
    pub pin_cores: Option<CpuList>,
    /// Run on this NUMA node's CPUs (default: the NIC's node, as perftest).
    #[arg(long = "numa_node", value_name = "NODE", conflicts_with = "pin_cores")]
    pub numa_node: Option<u32>,
    /// Report every -D seconds (default 5) until stopped (Ctrl-C): one row
    /// per period, as perftest.
    #[arg(long = "run_infinitely")]
    pub run_infinitely: bool,
    /// Before each size is timed, post a tx depth of requests on every QP
    /// and wait for them (perftest's warm-up; bandwidth tests).
    #[arg(long = "perform_warm_up")]
    pub perform_warm_up: bool,
    /// Register the buffers on 2 MiB huge pages (none reserved: exit 1, as
    /// perftest; reserve them in /proc/sys/vm/nr_hugepages).
    #[arg(long = "use_hugepages")]
    pub use_hugepages: bool,
    /// Do not bind to the NIC's NUMA node.
    #[arg(long = "disable_numa")]
    pub disable_numa: bool,
    /// Connection type: RC, the only one rdmaperf runs (perftest's default).
    #[arg(short = 'c', long = "connection", value_name = "RC", value_parser = connection_arg)]
    pub connection: Option<String>,
    /// Accepted for perftest's command lines; no effect: rdmaperf's figures
    /// do not depend on the CPU frequency, so there is no warning to silence.
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Post with ibv_post_send instead of the ibv_wr_* API (the default on
    /// the devices where perftest uses it: ConnectX-4 and later, BlueField,
    /// EFA, HNS; ibv_post_send elsewhere, as perftest).
    #[arg(long = "use_old_post_send")]
    pub use_old_post_send: bool,
    /// Accepted for perftest's command lines; no effect: rdmaperf never
    /// registers memory with PCIe relaxed ordering.
    #[arg(long = "disable_pcie_relaxed")]
    pub disable_pcie_relaxed: bool,
    /// Accepted for perftest's command lines; no effect: rdmaperf's
    /// handshake always checks that both sides speak the same protocol.
    #[arg(long = "dont_xchg_versions")]
    pub dont_xchg_versions: bool,
}

/// Flags (by argument id) of the bandwidth tests only.
const BW_ONLY: [&str; 15] = [
    "run_infinitely",
    "perform_warm_up",
    "no_peak",
    "report_both",
    "limit_bw",
    "limit_msgrate",
    "qps",
    "threads",
    "tx_depth",
    "cq_mod",
    "post_list",
    "bidirectional",
    "report_gbits",
    "expect_rate",
    "min_efficiency",
];
/// Bandwidth flags that perftest's latency tests accept and ignore; ours
/// too, with a note (`-q` only as 1: perftest refuses more QPs there).
const LAT_IGNORED: [&str; 5] = [
    "report_gbits",
    "tx_depth",
    "cq_mod",
    "limit_bw",
    "limit_msgrate",
];

/// Flags of the latency tests only.
const LAT_ONLY: [&str; 7] = [
    "perftest_stats",
    "report_histogram",
    "report_unsorted",
    "json_histogram",
    "max_latency",
    "percentile",
    "clock",
];
/// Flags that configure the test (the client's); a server ignores them.
const TEST_FLAGS: [&str; 23] = [
    "run_infinitely",
    "perform_warm_up",
    "margin",
    "sl",
    "tclass",
    "flow_label",
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
    "rx_depth",
    "atomic_type",
    "write_with_imm",
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
        // perftest accepts -r on the write tests too (it sizes the ring of
        // --write_with_imm there).
        "rx_depth" => matches!(spec.verb, Verb::Send | Verb::Write),
        "atomic_type" => spec.is_atomic(),
        "write_with_imm" => spec == TestSpec::WRITE_BW,
        // perftest: "Setting Outstanding reads only available on READ verb".
        "outs" => spec.uses_outstanding_reads(),
        _ => true,
    }
}

/// The `clap` command of `spec`'s binary: its name and about line, its
/// defaults in the help, the flags of other tests hidden.
pub fn command(spec: TestSpec) -> clap::Command {
    let d = spec.defaults();
    let mut cmd = crate::perftest_flags::extend(Cli::command())
        .name(spec.binary())
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
        .mut_arg("tx_depth", |a| a.default_value(d.tx_depth.to_string()))
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
    format!("ib_{}", spec.binary())
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
#[derive(Debug, Clone)]
pub struct Parsed {
    /// Every flag's value (defaults included).
    pub cli: Cli,
    /// The test-configuring flags given on the command line, as
    /// `-s/--size` (a server warns that it ignores them).
    pub test_flags_given: Vec<String>,
    /// Every flag given on the command line, as `-s/--size` (`SERVER`
    /// for the server's address).
    pub given: Vec<String>,
}

impl Parsed {
    /// Whether `flag` (as `-s/--size`) was on the command line.
    pub fn was_given(&self, flag: &str) -> bool {
        self.given.iter().any(|g| g == flag)
    }
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
    from_matches(spec, &cmd, &matches)
}

/// [`parse_from`] for a caller that is not the test binary's `main` (the
/// exporter's probe): clap's errors and `--help` are usage errors, never
/// an exit.
///
/// # Errors
/// As [`parse`], and clap's own errors, rendered.
pub fn try_parse_from(
    spec: TestSpec,
    args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
) -> Result<Parsed, UsageError> {
    let cmd = command(spec);
    let matches = cmd
        .clone()
        .try_get_matches_from(args)
        .map_err(|e| UsageError(e.render().to_string().trim_end().to_owned()))?;
    from_matches(spec, &cmd, &matches)
}

/// The flags of `matches`, checked against `spec`'s test.
fn from_matches(
    spec: TestSpec,
    cmd: &clap::Command,
    matches: &clap::ArgMatches,
) -> Result<Parsed, UsageError> {
    let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    if let Some(refusal) = crate::perftest_flags::refusal(matches, spec.binary()) {
        return Err(UsageError(refusal));
    }
    for a in cmd.get_arguments() {
        let id = a.get_id().as_str();
        if given(id) && !applies(spec, id) {
            if spec.metric == Metric::Lat && LAT_IGNORED.contains(&id) {
                eprintln!(
                    "{spec}: note: {} has no effect on a latency test (as in perftest)",
                    flag_name(cmd, id)
                );
                continue;
            }
            let belongs = if BW_ONLY.contains(&id) {
                "the bandwidth tests"
            } else if LAT_ONLY.contains(&id) {
                "the latency tests"
            } else if id == "outs" {
                "the read and atomic tests"
            } else if id == "rx_depth" {
                "the send and write tests"
            } else if id == "atomic_type" {
                "the atomic tests"
            } else if id == "write_with_imm" && spec == TestSpec::WRITE_LAT {
                return Err(UsageError(format!(
                    "--write_with_imm: not supported by {spec} yet (perftest's flag for RDMA WRITE \
                     with immediate); write_bw has it"
                )));
            } else {
                // inline_size and write_with_imm.
                "the write tests"
            };
            return Err(UsageError(format!(
                "{}: not an option of {}: it belongs to {belongs}",
                flag_name(cmd, id),
                spec.binary(),
            )));
        }
    }
    let cli = Cli::from_arg_matches(matches).map_err(|e| UsageError(e.to_string()))?;
    if let Some(f) = cli.output {
        let fits = match spec.metric {
            Metric::Bw => f != OutputFigure::Latency,
            Metric::Lat => f == OutputFigure::Latency,
        };
        if !fits {
            return Err(UsageError(match spec.metric {
                Metric::Bw => {
                    "--output: a bandwidth test's level is bandwidth or message_rate".into()
                }
                Metric::Lat => "--output: a latency test's level is latency".into(),
            }));
        }
        if cli.json.as_deref() == Some("-") {
            return Err(UsageError(
                "--output and --json - both print on stdout; give --json a file".into(),
            ));
        }
    }
    let test_flags_given = TEST_FLAGS
        .iter()
        .filter(|id| given(id))
        .map(|id| flag_name(cmd, id))
        .collect();
    let given = cmd
        .get_arguments()
        .map(|a| a.get_id().as_str())
        .filter(|id| given(id))
        .map(|id| match id {
            "server" => "SERVER".to_owned(),
            _ => flag_name(cmd, id),
        })
        .collect();
    Ok(Parsed {
        cli,
        test_flags_given,
        given,
    })
}

impl Cli {
    /// The test-configuring flags as given, for
    /// [`engine::bench::request::configure`] (perftest's rules live
    /// there, shared with the typed callers: a cluster pair, the
    /// exporter's probe).
    pub fn config_request(&self) -> ConfigRequest {
        ConfigRequest {
            size: self.run.size,
            all: self.run.all,
            iters: self.run.iters,
            duration: self.run.duration,
            margin: self.run.margin,
            run_infinitely: self.run_infinitely,
            mtu: self.run.mtu,
            path: self.path(),
            qps: self.qps,
            threads: self.threads,
            // Its default is the spec's, set in [`command`].
            tx_depth: Some(self.tx_depth),
            cq_mod: self.cq_mod,
            post_list: self.post_list,
            inline_size: self.inline_size,
            outs: self.outs,
            bidirectional: self.bidirectional,
            rx_depth: self.rx_depth,
            atomic_type: self.atomic_type,
            write_with_imm: self.write_with_imm,
            perform_warm_up: self.perform_warm_up,
            no_peak: self.no_peak,
            cpu_util: self.cpu_util,
        }
    }

    /// The path options (`-S`, `--tclass`, `--flow_label`).
    fn path(&self) -> engine::bench::config::PathConfig {
        engine::bench::config::PathConfig {
            sl: self.run.sl,
            traffic_class: self.run.tclass,
            flow_labels: self.run.flow_label.clone(),
        }
    }

    /// The bandwidth configuration the flags describe (client side):
    /// [`ConfigRequest::bw_config`].
    ///
    /// # Errors
    /// A usage error naming the flag.
    pub fn bw_config(&self, spec: TestSpec) -> Result<Adjusted<BwConfig>, UsageError> {
        self.config_request().bw_config(spec).map_err(usage)
    }

    /// The latency configuration the flags describe (client side):
    /// [`ConfigRequest::lat_config`].
    ///
    /// # Errors
    /// A usage error naming the flag.
    pub fn lat_config(&self, spec: TestSpec) -> Result<Adjusted<LatConfig>, UsageError> {
        self.config_request().lat_config(spec).map_err(usage)
    }
}

/// A refused configuration value: the user's input, named by its flag.
pub fn usage(e: ConfigError) -> UsageError {
    UsageError(e.to_string())
}

/// The options of a run, built once from the flags, with the lines to
/// say on stderr first (perftest's adjustments, flags a server ignores).
#[derive(Debug, Clone)]
pub struct Built {
    /// The options.
    pub options: RunOptions,
    /// Whole lines for stderr, e.g. `write_bw: note: ...`.
    pub said: Vec<String>,
}

impl Parsed {
    /// The typed options of `spec`'s run: the test configuration adjusted
    /// as perftest adjusts it (client), with every flag resolved to what
    /// the run uses.
    ///
    /// # Errors
    /// A usage error naming the flag.
    pub fn run_options(&self, spec: TestSpec) -> Result<Built, UsageError> {
        let cli = &self.cli;
        let mut said = Vec::new();
        let (spec, role) = match &cli.conn.server {
            Some(server) => {
                let configured = configure(spec, &cli.config_request()).map_err(usage)?;
                let spec = configured.spec;
                said.extend(
                    configured
                        .notes
                        .iter()
                        .map(|n| format!("{spec}: note: {n}")),
                );
                let role = RoleOptions::Client {
                    server: server.clone(),
                    config: configured.config.into(),
                };
                (spec, role)
            }
            None => {
                if !self.test_flags_given.is_empty() {
                    said.push(format!(
                        "{spec}: warning: test flags on the server are ignored ({}); the client's configuration is used",
                        self.test_flags_given.join(", ")
                    ));
                }
                (spec, RoleOptions::Server)
            }
        };
        if cli.conn.rdma_cm {
            refuse_beside_rdma_cm(cli.conn.gid_index, &cli.path(), cli.conn.pkey_index)
                .map_err(usage)?;
        }
        let options = RunOptions {
            spec,
            role,
            devices: vec![DeviceSelection {
                name: cli.device.ib_dev.clone(),
                port: cli.device.ib_port,
                gid_index: cli.conn.gid_index,
            }],
            connection: ConnectionOptions {
                port: cli.conn.port,
                bind: cli.conn.bind.clone(),
                timeout: cli.conn.timeout,
                accept_timeout: cli.conn.accept_timeout,
                persistent: cli.conn.persistent,
                retry_refused: true,
                pkey_index: cli.conn.pkey_index,
                qp_timeout: cli.conn.qp_timeout,
                rdma_cm: cli.conn.rdma_cm,
            },
            local: LocalOptions {
                post_path: cli.post_path(),
                huge_pages: cli.use_hugepages,
                clock: cli.clock,
                max_mem: cli.max_mem,
                sysfs: crate::sysfs::Sysfs::at(&cli.sysfs_root),
                placement: cli.placement(),
                explicit_inline: cli.inline_size.is_some(),
                // --output: the number alone, as perftest (no banner).
                banner: cli.output.is_none(),
            },
            output: cli.output_plan(),
            verdicts: VerdictPlan {
                expect_rate: cli.expect_rate,
                min_efficiency: cli.min_efficiency,
                limit_bw: cli.limit_bw,
                limit_msgrate: cli.limit_msgrate,
                max_latency: cli.max_latency,
                percentile: cli.percentile,
            },
        };
        Ok(Built { options, said })
    }
}

impl Cli {
    /// Where the results go and how they are shown.
    fn output_plan(&self) -> OutputPlan {
        OutputPlan {
            stdout_table: true,
            json: self.json.clone(),
            out_json: self.out_json.then(|| self.out_json_file.clone()),
            prom: self.prom.clone(),
            report_counters: self.report_counters.clone(),
            figure: self.output,
            unit: if self.report_gbits {
                Unit::Gbps
            } else {
                Unit::MibPerSec
            },
            no_peak: self.no_peak,
            cpu_util: self.cpu_util,
            report_both: self.report_both,
            report_histogram: self.report_histogram,
            report_unsorted: self.report_unsorted,
            perftest_stats: self.perftest_stats,
            json_histogram: self.json_histogram,
        }
    }
}

/// Parses a `-w`/`-y` limit: a number, zero or more.
///
/// # Errors
/// A message naming the text.
pub fn limit_arg(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a limit (a number, zero or more)")),
    }
}

/// The CPUs of `--pin_cores`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Parses `--pin_cores`.
///
/// # Errors
/// A message naming the part that is not a CPU or range.
pub fn cpu_list_arg(s: &str) -> Result<CpuList, String> {
    crate::placement::parse_cpu_list(s).map(CpuList)
}

impl Cli {
    /// How work requests are posted: `ibv_wr_*` unless
    /// `--use_old_post_send` (each side's own flag: it changes how a side
    /// posts, not what goes on the wire).
    pub fn post_path(&self) -> verbs::PostPath {
        if self.use_old_post_send {
            verbs::PostPath::Classic
        } else {
            verbs::PostPath::Extended
        }
    }

    /// Where the process should run (`--pin_cores`, `--numa_node`,
    /// `--disable_numa`, else the NIC's node).
    pub fn placement(&self) -> crate::placement::Placement {
        use crate::placement::Placement;
        match (&self.pin_cores, self.numa_node) {
            (Some(c), _) => Placement::Cores(c.0.clone()),
            (None, Some(n)) => Placement::Node(n),
            (None, None) if self.disable_numa => Placement::Unbound,
            (None, None) => Placement::NicNode,
        }
    }
}

/// Parses `-A/--atomic_type` (perftest's names).
///
/// # Errors
/// A message naming the value and the two types.
pub fn atomic_type_arg(s: &str) -> Result<engine::bench::spec::Verb, String> {
    match s {
        "FETCH_AND_ADD" => Ok(engine::bench::spec::Verb::FetchAdd),
        "CMP_AND_SWAP" => Ok(engine::bench::spec::Verb::CmpSwap),
        _ => Err(format!(
            "{s:?} is not an atomic type (perftest's are CMP_AND_SWAP and FETCH_AND_ADD)"
        )),
    }
}

/// Parses `-c/--connection`: RC runs; perftest's other types are refused
/// as not supported yet, anything else as no connection type.
///
/// # Errors
/// A message naming the value.
pub fn connection_arg(s: &str) -> Result<String, String> {
    match s {
        "RC" => Ok(s.to_owned()),
        "UC" | "UD" | "XRC" | "DC" | "SRD" | "RawEth" => Err(format!(
            "{s} connections are not supported by rdmaperf yet; only RC"
        )),
        _ => Err(format!(
            "{s:?} is not a connection type (perftest's are RC, UC, UD, XRC, DC, SRD; rdmaperf runs RC)"
        )),
    }
}

/// Parses a byte count flag value (`65536`, `64K`, `1M`).
///
/// # Errors
/// A message naming the text.
pub fn size_arg(s: &str) -> Result<u64, String> {
    engine::bench::config::parse_size(s)
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
    use crate::options::Configuration;
    use engine::bench::request::NO_PEAK_WARNING;

    fn parse_args(spec: TestSpec, args: &[&str]) -> Result<Parsed, UsageError> {
        parse_from(
            spec,
            std::iter::once(spec.name()).chain(args.iter().copied()),
        )
    }

    #[test]
    fn run_options_are_built_once_with_the_adjusted_configuration() {
        // A client: the -A operation's spec, its configuration adjusted
        // (-t clamped to -n), perftest's note said, one device.
        let p = parse_args(
            TestSpec::FETCH_ADD_BW,
            &[
                "-A",
                "CMP_AND_SWAP",
                "-n",
                "64",
                "-t",
                "128",
                "-d",
                "mlx5_0",
                "-x",
                "3",
                "srv",
            ],
        )
        .unwrap();
        let b = p.run_options(TestSpec::FETCH_ADD_BW).unwrap();
        let o = &b.options;
        assert_eq!(o.spec, TestSpec::CMP_SWAP_BW);
        let RoleOptions::Client { server, config } = &o.role else {
            panic!("{:?}", o.role)
        };
        assert_eq!(server, "srv");
        let Configuration::Bw(c) = config else {
            panic!("{config:?}")
        };
        assert_eq!((c.iters, c.tx_depth), (64, 64));
        assert_eq!(b.said.len(), 1, "{:?}", b.said);
        assert!(
            b.said[0].ends_with(
                ": note: -t/--tx-depth 128 is above the 64 iterations; using 64 (as perftest)"
            ),
            "{:?}",
            b.said
        );
        assert_eq!(
            o.devices,
            [DeviceSelection {
                name: Some("mlx5_0".into()),
                port: None,
                gid_index: Some(3)
            }]
        );
        assert!(o.connection.retry_refused && o.output.stdout_table && o.local.banner);
        // --output: no banner; --out_json: its file.
        let p = parse_args(
            TestSpec::WRITE_BW,
            &[
                "--output",
                "bandwidth",
                "--out_json",
                "--report_gbits",
                "srv",
            ],
        )
        .unwrap();
        let o = p.run_options(TestSpec::WRITE_BW).unwrap().options;
        assert!(!o.local.banner);
        assert_eq!(o.output.unit, Unit::Gbps);
        assert_eq!(
            o.output.out_json.as_deref(),
            Some(std::path::Path::new(
                engine::format::perftest_json::DEFAULT_FILE
            ))
        );
        // A server: no configuration, and the test flags it ignores said.
        let p = parse_args(TestSpec::WRITE_BW, &["-s", "4096", "--persistent"]).unwrap();
        let b = p.run_options(TestSpec::WRITE_BW).unwrap();
        assert!(matches!(b.options.role, RoleOptions::Server));
        assert!(b.options.connection.persistent);
        assert_eq!(
            b.said,
            [
                "write_bw: warning: test flags on the server are ignored (-s/--size); the client's configuration is used"
            ]
        );
        // The tx depth's default is the spec's.
        let p = parse_args(TestSpec::WRITE_BW, &["srv"]).unwrap();
        let o = p.run_options(TestSpec::WRITE_BW).unwrap().options;
        let RoleOptions::Client {
            config: Configuration::Bw(c),
            ..
        } = &o.role
        else {
            panic!("{:?}", o.role)
        };
        assert_eq!(c.tx_depth, TestSpec::WRITE_BW.defaults().tx_depth);
    }

    /// The typed callers (a cluster pair, the exporter's probe) start
    /// from the options' defaults and [`ConfigRequest::default`]: they
    /// are what a command line without flags gives, for every test.
    #[test]
    fn a_bare_command_line_has_the_typed_defaults() {
        for spec in engine::bench::spec::IMPLEMENTED {
            let server = parse_args(spec, &[]).unwrap().run_options(spec).unwrap();
            let o = server.options;
            assert_eq!(o.connection, ConnectionOptions::default(), "{spec}");
            assert_eq!(o.local, LocalOptions::default(), "{spec}");
            assert_eq!(o.verdicts, VerdictPlan::default(), "{spec}");
            assert_eq!(
                o.output,
                OutputPlan {
                    stdout_table: true,
                    ..OutputPlan::default()
                },
                "{spec}"
            );
            assert_eq!(o.devices, [DeviceSelection::default()]);
            let p = parse_args(spec, &["host"]).unwrap();
            // The tx depth's default is filled by clap, from the spec.
            assert_eq!(
                p.cli.config_request(),
                ConfigRequest {
                    tx_depth: Some(spec.defaults().tx_depth),
                    ..ConfigRequest::default()
                },
                "{spec}"
            );
            let RoleOptions::Client { config, .. } = p.run_options(spec).unwrap().options.role
            else {
                panic!("{spec}: not a client");
            };
            let typed = configure(spec, &ConfigRequest::default()).unwrap();
            assert_eq!(config, typed.config.into(), "{spec}");
        }
    }

    /// Every argument id the applicability tables (and `applies`' own
    /// cases) name is one of clap's, in every test's command: a misspelt
    /// id would silently apply everywhere.
    #[test]
    fn the_flag_tables_name_only_real_argument_ids() {
        let case_by_case = [
            "inline_size",
            "rx_depth",
            "atomic_type",
            "write_with_imm",
            "outs",
        ];
        let tables: [(&str, &[&str]); 5] = [
            ("BW_ONLY", &BW_ONLY),
            ("LAT_ONLY", &LAT_ONLY),
            ("LAT_IGNORED", &LAT_IGNORED),
            ("TEST_FLAGS", &TEST_FLAGS),
            ("applies' cases", &case_by_case),
        ];
        for spec in engine::bench::spec::IMPLEMENTED {
            let cmd = command(spec);
            let ids: Vec<&str> = cmd.get_arguments().map(|a| a.get_id().as_str()).collect();
            for (table, names) in tables {
                for id in names {
                    assert!(
                        ids.contains(id),
                        "{table} names {id:?}, not an argument of {spec}"
                    );
                }
            }
        }
    }

    #[test]
    fn flags_of_other_tests_are_refused_naming_the_flag() {
        let e = parse_args(TestSpec::READ_LAT, &["-b", "host"]).unwrap_err();
        assert_eq!(
            e.0,
            "-b/--bidirectional: not an option of read_lat: it belongs to the bandwidth tests"
        );
        // perftest's latency tests accept and ignore these; so do ours.
        assert!(parse_args(TestSpec::READ_LAT, &["-Q", "4", "--report_gbits", "host"]).is_ok());
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
        let c = p.cli.bw_config(TestSpec::READ_BW).unwrap().config;
        assert_eq!(
            (c.sizes[0], c.iters, c.cq_mod, c.inline_size),
            (65536, 1000, 1, 0)
        );
        let p = parse_args(TestSpec::WRITE_BW, &["host"]).unwrap();
        assert_eq!(
            p.cli.bw_config(TestSpec::WRITE_BW).unwrap().config.iters,
            5000
        );
        let p = parse_args(TestSpec::WRITE_LAT, &["-s", "64", "host"]).unwrap();
        let c = p.cli.lat_config(TestSpec::WRITE_LAT).unwrap().config;
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
    fn a_servers_receive_ring_atomic_and_immediate_flags_are_named_as_ignored() {
        // The client's configuration decides them: a server that passes
        // them is told they do nothing there.
        let p = parse_args(TestSpec::SEND_BW, &["-r", "64"]).unwrap();
        assert_eq!(p.test_flags_given, vec!["-r/--rx-depth".to_owned()]);
        let p = parse_args(TestSpec::WRITE_BW, &["--write_with_imm"]).unwrap();
        assert_eq!(p.test_flags_given, vec!["--write_with_imm".to_owned()]);
        let p = parse_args(TestSpec::FETCH_ADD_BW, &["-A", "CMP_AND_SWAP"]).unwrap();
        assert_eq!(p.test_flags_given, vec!["-A/--atomic_type".to_owned()]);
    }

    #[test]
    fn seconds_beyond_a_duration_are_refused_not_a_panic() {
        assert!(seconds_arg("1e20").unwrap_err().contains("too many"));
        assert!(seconds_arg("0").is_err() && seconds_arg("x").is_err());
    }

    #[test]
    fn long_flags_match_by_unique_prefix_and_both_spellings_as_getopt_long() {
        // perftest's own spellings and getopt_long prefixes.
        let p = parse_args(
            TestSpec::WRITE_BW,
            &[
                "--report_gbit",
                "--inline_size=64",
                "--post_list",
                "2",
                "host",
                "--tx_depth=256",
            ],
        )
        .unwrap();
        assert!(p.cli.report_gbits);
        assert_eq!(
            (p.cli.inline_size, p.cli.post_list, p.cli.tx_depth),
            (Some(64), 2, 256)
        );
        assert_eq!(p.cli.conn.server.as_deref(), Some("host"));
        let p = parse_args(
            TestSpec::WRITE_BW,
            &["--siz", "4096", "--iter=10", "host", "-F"],
        )
        .unwrap();
        assert_eq!((p.cli.run.size, p.cli.run.iters), (Some(4096), Some(10)));
        let p = parse_args(TestSpec::WRITE_LAT, &["--report-histogrm", "host"]).unwrap();
        assert!(p.cli.report_histogram);
        // Ambiguous, as in perftest (--report_gbits, --report-both, ...).
        assert!(
            command(TestSpec::WRITE_BW)
                .try_get_matches_from(["write_bw", "--report", "host"])
                .is_err()
        );
    }

    #[test]
    fn rdma_cm_is_taken_and_the_flags_it_decides_for_are_refused_beside_it() {
        let p = parse_args(TestSpec::WRITE_BW, &["-R", "host"]).unwrap();
        let built = p.run_options(TestSpec::WRITE_BW).unwrap();
        assert!(built.options.connection.rdma_cm);
        let p = parse_args(TestSpec::WRITE_BW, &["--rdma_cm"]).unwrap();
        assert!(
            p.run_options(TestSpec::WRITE_BW)
                .unwrap()
                .options
                .connection
                .rdma_cm
        );
        for (args, flag) in [
            (&["-R", "-x", "3", "host"][..], "-x/--gid-index"),
            (&["-R", "-S", "2", "host"][..], "-S/--sl"),
            (&["-R", "--tclass", "96", "host"][..], "--tclass"),
            (&["-R", "--flow_label", "7", "host"][..], "--flow_label"),
            (&["-R", "--pkey_index", "1", "host"][..], "--pkey_index"),
        ] {
            let e = parse_args(TestSpec::WRITE_BW, args)
                .unwrap()
                .run_options(TestSpec::WRITE_BW)
                .unwrap_err();
            assert!(
                e.0.starts_with(&format!(
                    "{flag}: under -R/--rdma_cm the connection manager chooses the GID and path"
                )),
                "{args:?}: {e}"
            );
        }
    }

    #[test]
    fn perftest_flags_rdmaperf_lacks_are_refused_as_not_supported_yet() {
        for (args, starts) in [
            (
                &["-z", "host"][..],
                "-z/--comm_rdma_cm: not supported by write_bw yet",
            ),
            (
                &["--use_cuda=0", "host"][..],
                "--use_cuda: not supported by write_bw yet",
            ),
            (
                &["--rate_un", "g", "host"][..],
                "--rate_units: not supported",
            ),
            (&["-T", "106", "host"][..], "-T/--tos: not supported"),
        ] {
            let e = parse_args(TestSpec::WRITE_BW, args).unwrap_err();
            assert!(e.0.starts_with(starts), "{args:?}: {}", e.0);
            assert!(e.0.contains("docs/perftest-compat.md"), "{}", e.0);
        }
        // Only RC connects; other types are named, not unknown.
        assert!(parse_args(TestSpec::WRITE_BW, &["-c", "RC", "host"]).is_ok());
        let e = command(TestSpec::WRITE_BW)
            .try_get_matches_from(["write_bw", "-c", "UD", "host"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("UD connections are not supported by rdmaperf yet"),
            "{e}"
        );
    }

    #[test]
    fn perftest_adjustments_are_made_and_said() {
        let p = parse_args(
            TestSpec::WRITE_BW,
            &["-a", "-s", "64", "-n", "50", "-Q", "500", "host"],
        )
        .unwrap();
        let a = p.cli.bw_config(TestSpec::WRITE_BW).unwrap();
        assert_eq!(a.config.sizes.len(), 23);
        assert_eq!((a.config.tx_depth, a.config.cq_mod), (50, 50));
        assert_eq!(a.notes.len(), 3, "{:?}", a.notes);
        // perftest's margin: a quarter of the duration in whole seconds.
        let p = parse_args(TestSpec::WRITE_BW, &["-D", "4", "host"]).unwrap();
        let a = p.cli.bw_config(TestSpec::WRITE_BW).unwrap();
        assert_eq!(a.config.duration.unwrap().margin, 1.0);
        assert!(a.notes.iter().any(|n| n == NO_PEAK_WARNING));
        assert!(!p.cli.output_plan().shows_peak(&a.config));
        let p = parse_args(TestSpec::WRITE_BW, &["-D", "2", "host"]).unwrap();
        assert_eq!(
            p.cli
                .bw_config(TestSpec::WRITE_BW)
                .unwrap()
                .config
                .duration
                .unwrap()
                .margin,
            0.0
        );
        let p = parse_args(TestSpec::WRITE_BW, &["-n", "20001", "host"]).unwrap();
        assert!(
            !p.cli
                .output_plan()
                .shows_peak(&p.cli.bw_config(TestSpec::WRITE_BW).unwrap().config)
        );
        let p = parse_args(TestSpec::WRITE_BW, &["-N", "host"]).unwrap();
        let a = p.cli.bw_config(TestSpec::WRITE_BW).unwrap();
        assert!(!p.cli.output_plan().shows_peak(&a.config) && a.notes.is_empty());
        let p = parse_args(TestSpec::WRITE_BW, &["host"]).unwrap();
        assert!(
            p.cli
                .output_plan()
                .shows_peak(&p.cli.bw_config(TestSpec::WRITE_BW).unwrap().config)
        );
    }

    #[test]
    fn placement_flags_parse() {
        use crate::placement::Placement;
        let p = parse_args(TestSpec::WRITE_BW, &["--pin_cores=0-1,3", "host"]).unwrap();
        assert_eq!(p.cli.placement(), Placement::Cores(vec![0, 1, 3]));
        let p = parse_args(TestSpec::READ_LAT, &["--numa_node", "1", "host"]).unwrap();
        assert_eq!(p.cli.placement(), Placement::Node(1));
        let p = parse_args(TestSpec::READ_BW, &["--disable_numa", "host"]).unwrap();
        assert_eq!(p.cli.placement(), Placement::Unbound);
        let p = parse_args(TestSpec::READ_BW, &["host"]).unwrap();
        assert_eq!(p.cli.placement(), Placement::NicNode);
    }

    #[test]
    fn every_flag_reads_back_as_its_type() {
        // A flag whose parser and field disagree panics in clap at access
        // time: give every perftest flag a value and read them all.
        let p = parse_args(
            TestSpec::WRITE_BW,
            &[
                "--pin_cores=0",
                "-S",
                "3",
                "--tclass",
                "106",
                "--flow_label",
                "1,2",
                "--pkey_index",
                "1",
                "-W",
                "hw_counters/sent_pkts",
                "--report-both",
                "--run_infinitely",
                "--perform_warm_up",
                "--use_hugepages",
                "-w",
                "1",
                "-y",
                "1",
                "--output=bandwidth",
                "--out_json",
                "--out_json_file=f.json",
                "-c",
                "RC",
                "-F",
                "-N",
                "--cpu_util",
                "--use_old_post_send",
                "--disable_pcie_relaxed",
                "--dont_xchg_versions",
                "host",
            ],
        )
        .unwrap();
        assert_eq!(p.cli.run.flow_label, vec![1, 2]);
        let p = parse_args(
            TestSpec::WRITE_LAT,
            &[
                "-U",
                "--perftest-stats",
                "--numa_node=0",
                "--output=latency",
                "host",
            ],
        )
        .unwrap();
        assert!(p.cli.report_unsorted && p.cli.perftest_stats);
    }
}
