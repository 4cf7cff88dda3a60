//! The options of one run, typed and built once ([`crate::args`] builds
//! them from the command line; a cluster pair from its typed `PairTest`,
//! starting from these types' [`Default`]s, which equal a command line
//! without flags; the exporter's probe from its URL). Every caller makes
//! the test configuration with [`engine::bench::request::configure`].
//! Nothing below [`crate::runner::main`] sees the command line: the
//! runner, the session and the measured loops read these.
//!
//! - [`RunOptions`]: what to run ([`TestSpec`]), as which side
//!   ([`RoleOptions`]: a client carries the adjusted test configuration),
//!   on which devices ([`DeviceSelection`], a list: one entry today), over
//!   which control connection ([`ConnectionOptions`]), this side's own
//!   choices ([`LocalOptions`]), where the results go ([`OutputPlan`]) and
//!   what they are judged against ([`VerdictPlan`]).

use std::path::PathBuf;
use std::time::Duration;

use engine::bench::clock::ClockChoice;
use engine::bench::config::{BwConfig, ConfigRecord, LatConfig, TestConfig};
use engine::bench::spec::TestSpec;
use engine::fabric::link::ExpectRate;
use engine::format::perftest_json::OutputFigure;
use engine::format::table::Unit;
use engine::results::lat::Percentile;

use crate::placement::Placement;

/// Everything one side of a run needs.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// The test (an atomic client's: the `-A` operation's).
    pub spec: TestSpec,
    /// Client (with the test configuration) or server.
    pub role: RoleOptions,
    /// The devices and ports this side runs on: one entry today (a
    /// multi-rail run adds entries, not fields).
    pub devices: Vec<DeviceSelection>,
    /// The control connection.
    pub connection: ConnectionOptions,
    /// This side's own choices (not sent to the peer).
    pub local: LocalOptions,
    /// Where the results go.
    pub output: OutputPlan,
    /// What the results are judged against.
    pub verdicts: VerdictPlan,
}

/// Which side this is.
#[derive(Debug, Clone, PartialEq)]
pub enum RoleOptions {
    /// Connects to `server` and runs `config` there.
    Client {
        /// Host name or address of the server.
        server: String,
        /// The test configuration, adjusted as perftest adjusts it.
        config: Configuration,
    },
    /// Listens and runs what its clients ask.
    Server,
}

/// A client's test configuration, per metric.
#[derive(Debug, Clone, PartialEq)]
pub enum Configuration {
    /// A bandwidth test's.
    Bw(BwConfig),
    /// A latency test's.
    Lat(LatConfig),
}

impl From<ConfigRecord> for Configuration {
    /// What [`engine::bench::request::configure`] made.
    fn from(c: ConfigRecord) -> Self {
        match c {
            ConfigRecord::Bw(b) => Self::Bw(b),
            ConfigRecord::Lat(l) => Self::Lat(l),
        }
    }
}

/// A test configuration's type, taken out of a [`Configuration`].
pub trait FromConfiguration: TestConfig + Sized {
    /// This type's configuration, when `c` holds one.
    fn from_configuration(c: &Configuration) -> Option<Self>;
}

impl FromConfiguration for BwConfig {
    fn from_configuration(c: &Configuration) -> Option<Self> {
        match c {
            Configuration::Bw(b) => Some(b.clone()),
            Configuration::Lat(_) => None,
        }
    }
}

impl FromConfiguration for LatConfig {
    fn from_configuration(c: &Configuration) -> Option<Self> {
        match c {
            Configuration::Lat(l) => Some(l.clone()),
            Configuration::Bw(_) => None,
        }
    }
}

/// One device and port to run on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceSelection {
    /// Device name (`None`: the first device).
    pub name: Option<String>,
    /// Port, 1-based (`None`: the first active port).
    pub port: Option<u8>,
    /// GID index (`None`: chosen as perftest does).
    pub gid_index: Option<u32>,
}

/// The control connection and the bounds on the peer.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionOptions {
    /// TCP port of the control channel.
    pub port: u16,
    /// Server: the address it listens on.
    pub bind: String,
    /// Bound on every wait for the peer.
    pub timeout: Duration,
    /// Server: how long it waits for a client.
    pub accept_timeout: Duration,
    /// Server: serves clients one after another until stopped.
    pub persistent: bool,
    /// Client: retry a refused connection until `timeout` (the server may
    /// start a moment later); `false` reports a refusal at once (a probe).
    pub retry_refused: bool,
    /// P_Key index of this side's QPs.
    pub pkey_index: u16,
    /// QP ACK timeout exponent.
    pub qp_timeout: u8,
    /// Client: connect the QPs through rdma_cm (`-R`); a server follows
    /// its client's choice.
    pub rdma_cm: bool,
}

/// `--bind`'s default: every address.
pub const DEFAULT_BIND: &str = "0.0.0.0";
/// `--timeout`'s default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
/// `--accept-timeout`'s default.
pub const DEFAULT_ACCEPT_TIMEOUT: Duration = Duration::from_secs(300);
/// `-u/--qp-timeout`'s default: perftest's `DEF_QP_TIME` (14: 4.096 µs ×
/// 2^14, about 67 ms).
pub const DEFAULT_QP_TIMEOUT: u8 = 14;
/// `--max-mem`'s default: 1 GiB.
pub const DEFAULT_MAX_MEM: u64 = 1 << 30;
/// `--min-efficiency`'s default.
pub const DEFAULT_MIN_EFFICIENCY: f64 = 0.9;

impl Default for ConnectionOptions {
    /// A command line without connection flags (the test
    /// `a_bare_command_line_has_the_typed_defaults` in `args.rs` keeps
    /// the two equal).
    fn default() -> Self {
        Self {
            port: engine::bench::config::DEFAULT_PORT,
            bind: DEFAULT_BIND.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            accept_timeout: DEFAULT_ACCEPT_TIMEOUT,
            persistent: false,
            retry_refused: true,
            pkey_index: 0,
            qp_timeout: DEFAULT_QP_TIMEOUT,
            rdma_cm: false,
        }
    }
}

/// This side's own choices.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalOptions {
    /// How work requests are posted.
    pub post_path: verbs::PostPath,
    /// Buffers on 2 MiB huge pages.
    pub huge_pages: bool,
    /// The latency tests' sample clock.
    pub clock: ClockChoice,
    /// Server: most memory it registers for a client's test.
    pub max_mem: u64,
    /// The sysfs this side reads (its port's rate and counters, its
    /// NIC's NUMA node): built once, from `--sysfs-root`.
    pub sysfs: crate::sysfs::Sysfs,
    /// Where the process runs (applied by `main`, never by a library call:
    /// it binds the whole process).
    pub placement: Placement,
    /// Client: `-I` was given (a refused inline size is then an error, not
    /// a retry without inline).
    pub explicit_inline: bool,
    /// Banners, notes and progress on stderr (`false`: a probe).
    pub banner: bool,
}

impl Default for LocalOptions {
    /// A command line without local flags: the `ibv_wr_*` path, the NIC's
    /// NUMA node, banners on.
    fn default() -> Self {
        Self {
            post_path: verbs::PostPath::Extended,
            huge_pages: false,
            clock: ClockChoice::Auto,
            max_mem: DEFAULT_MAX_MEM,
            sysfs: crate::sysfs::Sysfs::live(),
            placement: Placement::NicNode,
            explicit_inline: false,
            banner: true,
        }
    }
}

/// Where a run's results go, and how they are shown. [`Default`]: a
/// command line without output flags, but nothing on stdout.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutputPlan {
    /// Whether the table (or `--output`'s figure) goes to stdout.
    pub stdout_table: bool,
    /// `--json FILE`, or `-` for stdout instead of the table.
    pub json: Option<String>,
    /// perftest's `--out_json` file.
    pub out_json: Option<PathBuf>,
    /// `--prom FILE`.
    pub prom: Option<PathBuf>,
    /// `-W`: the counters shown after each size.
    pub report_counters: Option<String>,
    /// `--output`: one figure per size instead of the table.
    pub figure: Option<OutputFigure>,
    /// The bandwidth unit (`--report_gbits`).
    pub unit: Unit,
    /// `-N`: no peak.
    pub no_peak: bool,
    /// `--cpu_util`.
    pub cpu_util: bool,
    /// `--report-both`.
    pub report_both: bool,
    /// `-H`.
    pub report_histogram: bool,
    /// `-U`.
    pub report_unsorted: bool,
    /// `--perftest-stats`.
    pub perftest_stats: bool,
    /// `--json-histogram`.
    pub json_histogram: bool,
}

impl OutputPlan {
    /// Whether the bandwidth table shows a peak: not with `-N`, nor where
    /// perftest measures none ([`BwConfig::measures_peak`]; it prints
    /// 0.00).
    pub fn shows_peak(&self, cfg: &BwConfig) -> bool {
        !self.no_peak && cfg.measures_peak()
    }

    /// Whether the CPU column is shown: `--cpu_util` in duration mode
    /// (perftest's column exists there only).
    pub fn cpu_column(&self, duration_mode: bool) -> bool {
        self.cpu_util && duration_mode
    }
}

/// What a run's results are judged against.
#[derive(Debug, Clone, PartialEq)]
pub struct VerdictPlan {
    /// `--expect-rate`.
    pub expect_rate: Option<ExpectRate>,
    /// `--min-efficiency`.
    pub min_efficiency: f64,
    /// `-w`.
    pub limit_bw: Option<f64>,
    /// `-y`.
    pub limit_msgrate: Option<f64>,
    /// `--max-latency`.
    pub max_latency: Option<f64>,
    /// `--percentile`.
    pub percentile: Percentile,
}

impl Default for VerdictPlan {
    /// A command line without verdict flags: nothing judged but the
    /// median, were `--max-latency` given.
    fn default() -> Self {
        Self {
            expect_rate: None,
            min_efficiency: DEFAULT_MIN_EFFICIENCY,
            limit_bw: None,
            limit_msgrate: None,
            max_latency: None,
            percentile: Percentile::Median,
        }
    }
}

impl RunOptions {
    /// The device of a single-device run: the first (none given: the
    /// first device, its first active port).
    pub fn device(&self) -> DeviceSelection {
        self.devices.first().cloned().unwrap_or_default()
    }

    /// Whether this side is the client.
    pub fn is_client(&self) -> bool {
        matches!(self.role, RoleOptions::Client { .. })
    }
}
