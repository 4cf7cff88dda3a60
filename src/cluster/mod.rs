//! `rdmaperf cluster`: one launcher job (srun, mpirun, torchrun) tests
//! every link of N nodes. Launched once per node, each process finds its
//! rank, binds a pair listener per rail, joins the coordinator (rank 0),
//! runs the rounds it is sent — `write_bw` both ways against its partner
//! on every rail at once, through the session runner called as a
//! library — and prints its line;
//! rank 0 also coordinates and writes the report. The pure logic is
//! `engine::cluster`; this module moves bytes and runs tests.
//!
//! - [`ClusterArgs`]: the command line, built once into [`ClusterPlan`];
//! - [`rank`]: one rank's life (join, rounds, pair tests);
//! - [`coordinator`]: rank 0's gathering, rounds, verdicts and report;
//! - [`pair`]: one direction of one pair (a real test, or `--simulate`'s
//!   fabricated figure);
//! - [`selftest`]: one rank, the node self-test: rail k against rail k+1;
//! - [`simulated`]: `--simulate-ranks N`: rank 0's real coordinator, the
//!   ranks as state machines in helper processes, faults on demand;
//! - [`report_files`]: rank 0's report directory, written as streams.

pub mod coordinator;
pub mod history_files;
pub mod pair;
pub mod rank;
pub mod report_files;
pub mod selftest;
pub mod simulated;

use std::path::PathBuf;
use std::time::Duration;

use engine::cluster::launch::{self, Coordinator, CoordinatorSource, Launch, RankFlags};
use engine::cluster::pair_test::{LAT_ITERATIONS, PairTest};
use engine::cluster::rails::{self, RailName, RailSpec};
use engine::cluster::schedule::Pattern;
use engine::cluster::verdict::{DEFAULT_RELATIVE_BW, DEFAULT_RELATIVE_LAT, Thresholds};
use engine::fabric::link::ExpectRate;
use engine::results::lat::parse_max_latency;

use crate::args::{seconds_arg, size_arg};
use crate::exit::UsageError;
use crate::options::DeviceSelection;

/// `rdmaperf cluster`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// This process's rank, when no launcher sets it (torchrun, mpirun, PMI and srun do).
    #[arg(long, value_name = "N")]
    pub rank: Option<u32>,
    /// The number of ranks, when no launcher sets it.
    #[arg(long, value_name = "N")]
    pub size: Option<u32>,
    /// Where rank 0 coordinates (default: torchrun's MASTER_ADDR on MASTER_PORT+1, or Slurm's first node on a port from the job id; required under mpirun without Slurm).
    #[arg(long, value_name = "HOST:PORT")]
    pub coordinator: Option<String>,
    /// How long rank 0 waits for every rank, and a rank for rank 0, seconds.
    #[arg(long = "rendezvous-timeout", value_name = "SECONDS", default_value = "60", value_parser = seconds_arg)]
    pub rendezvous_timeout: Duration,
    /// Who meets whom: all-pairs (every pair once), quick (one bisection round, then retests of its suspects), ring, leaves (with a topology: one round within each group of nodes under the same leaf switches, then every pair of groups).
    #[arg(long, value_name = "PATTERN", default_value = "all-pairs")]
    pub pattern: String,
    /// A custom schedule: lines `ROUND A B` (A and B ranks or host names); replaces --pattern.
    #[arg(long = "pairs-file", value_name = "FILE")]
    pub pairs_file: Option<PathBuf>,
    /// The fabric's switches: Slurm's topology.conf or a saved ibnetdiscover output (rank 0 reads it; without it, the ranks' SLURM_TOPOLOGY_ADDR when Slurm's topology/tree plugin set it).
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// This rank's RDMA device and port (`-d`, `-i`), as the test binaries take them.
    #[command(flatten)]
    pub device: crate::args::DeviceArgs,
    /// This node's rails: auto (every ACTIVE port of the node's main link layer, in device-name order) or DEV[:PORT],...; each pair runs on every rail both ranks have at once (rail k with rail k), the coordinator checks every rank's rails. `-d` names one rail.
    #[arg(long, value_name = "auto|DEV[:PORT],...")]
    pub rails: Option<String>,
    /// This rank's GID index (default: chosen as perftest does).
    #[arg(short = 'x', long = "gid-index", value_name = "INDEX")]
    pub gid_index: Option<u32>,
    /// write_bw's message size per pair (rank 0's counts).
    #[arg(short = 's', long = "message-size", value_name = "BYTES", default_value = "1048576", value_parser = size_arg)]
    pub message_size: u64,
    /// Seconds each direction of a pair runs (rank 0's counts).
    #[arg(
        short = 'D',
        long = "duration",
        value_name = "SECONDS",
        default_value_t = 2
    )]
    pub duration: u32,
    /// QPs per pair (rank 0's counts).
    #[arg(short = 'q', long = "qp", value_name = "QPS", default_value_t = 1)]
    pub qps: u32,
    /// Connect the pairs' QPs through rdma_cm (iWARP needs it; rank 0's counts).
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// The bound on every wait for a peer within a pair's test, seconds (rank 0's counts).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u32,
    /// Expected rate: auto (the slower of each direction's two ports' negotiated rates) or Gb/s; a direction below it × --min-efficiency FAILs.
    #[arg(long = "expect-rate", value_name = "auto|GBPS")]
    pub expect_rate: Option<ExpectRate>,
    /// The fraction of --expect-rate a direction must reach.
    #[arg(
        long = "min-efficiency",
        value_name = "FRACTION",
        default_value_t = 0.9
    )]
    pub min_efficiency: f64,
    /// A direction below this fraction of the cluster's best bandwidth FAILs.
    #[arg(long = "relative-bw", value_name = "FRACTION", default_value_t = DEFAULT_RELATIVE_BW)]
    pub relative_bw: f64,
    /// Also measure latency: after each direction's write_bw, a write_lat the same way (1,000 round trips of 2 bytes; rank 0's counts).
    #[arg(long)]
    pub latency: bool,
    /// With --latency: write_lat's round trips per direction (rank 0's counts).
    #[arg(short = 'n', long = "iters", value_name = "N", default_value_t = LAT_ITERATIONS)]
    pub lat_iters: u64,
    /// A port error counter not to judge, e.g. hw_counters/duplicate_request; NAME* matches by prefix (rank 0's counts; repeatable).
    #[arg(long = "ignore-counter", value_name = "NAME")]
    pub ignore_counters: Vec<String>,
    /// With --latency: a direction whose --percentile exceeds this many usec FAILs.
    #[arg(long = "max-latency", value_name = "USEC", value_parser = parse_max_latency)]
    pub max_latency: Option<f64>,
    /// With --latency: which figure is judged: median, p50, p90, p99, p99.9, p99.99, max, avg.
    #[arg(long = "percentile", value_name = "P", default_value = "median")]
    pub percentile: String,
    /// With --latency: a direction above this multiple of the cluster's minimum latency FAILs.
    #[arg(long = "relative-lat", value_name = "FACTOR", default_value_t = DEFAULT_RELATIVE_LAT)]
    pub relative_lat: f64,
    /// Read each rank's port rate and error counters below this directory instead of /sys.
    #[arg(
        long = "sysfs-root",
        value_name = "DIR",
        default_value = "/sys",
        hide = true
    )]
    pub sysfs_root: PathBuf,
    /// Rank 0 writes pairs.jsonl, summary.json, metrics.prom and report.html here (created if missing).
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// With --report: how many of the slowest directions metrics.prom carries as series, 0 to 10000 (default 10; pairs.jsonl has every one).
    #[arg(long = "prom-worst", value_name = "K", value_parser = prom_worst)]
    pub prom_worst: Option<usize>,
    /// With --report: gzip pairs.jsonl and pair-sums.jsonl (to .jsonl.gz): auto (above 65,536 directions), gzip, none (default auto).
    #[arg(long = "report-compression", value_name = "auto|gzip|none")]
    pub report_compression: Option<report_files::Compression>,
    /// Rank 0 keeps every direction's past figures here (cluster-history.json, created owner-only) and fails a direction below --baseline-drop × the median of its own last --baseline-runs passing runs.
    #[arg(long = "history", value_name = "DIR")]
    pub history: Option<PathBuf>,
    /// With --history: the fraction of its baseline under which a direction fails.
    #[arg(long = "baseline-drop", value_name = "FRACTION")]
    pub baseline_drop: Option<f64>,
    /// With --history: how many passing runs a baseline is the median of (and needs before it judges).
    #[arg(long = "baseline-runs", value_name = "K")]
    pub baseline_runs: Option<usize>,
    /// The address partners reach this rank's tests at (default: the local address of its connection to rank 0).
    #[arg(long = "pair-address", value_name = "ADDR")]
    pub pair_address: Option<String>,
    /// No device: every pair's figure is fabricated (tests the launch, rendezvous, rounds and report).
    #[arg(long)]
    pub simulate: bool,
    /// Run a whole job of N simulated ranks on this machine (implies --simulate): rank 0's real coordinator here, the ranks as state machines in helper processes.
    #[arg(long = "simulate-ranks", value_name = "N")]
    pub simulate_ranks: Option<u32>,
    /// With --simulate-ranks: this rank never joins (repeatable).
    #[arg(long = "simulate-absent", value_name = "RANK")]
    pub simulate_absent: Vec<u32>,
    /// With --simulate-ranks: this rank closes its connection when round ROUND starts (repeatable).
    #[arg(long = "simulate-die", value_name = "RANK:ROUND", value_parser = simulated::death_spot)]
    pub simulate_die: Vec<simulated::DeathSpot>,
    /// With --simulate-ranks: this rank stops reading once the run starts and never reports (repeatable).
    #[arg(long = "simulate-mute", value_name = "RANK")]
    pub simulate_mute: Vec<u32>,
    /// With --simulate-ranks: the simulated ranks' host names, rank 0 first (a hostlist, e.g. node[0000-1023]; as many as ranks), so that --topology places them.
    #[arg(long = "simulate-hosts", value_name = "HOSTLIST")]
    pub simulate_hosts: Option<String>,
    /// With --simulate-ranks and --topology: every direction crossing this leaf switch's uplinks gets a fabricated low figure; NAME:RAIL only on that rail (repeatable).
    #[arg(long = "simulate-slow-switch", value_name = "NAME[:RAIL]", value_parser = simulated::slow_switch)]
    pub simulate_slow_switch: Vec<simulated::SlowSwitch>,
    /// A helper process of --simulate-ranks: runs ranks FIRST to LAST.
    #[arg(long = "simulate-fleet", value_name = "FIRST:LAST", value_parser = simulated::rank_range, hide = true)]
    pub simulate_fleet: Option<(u32, u32)>,
    /// With --simulate: how long each fabricated direction takes, ms (rank 0's counts).
    #[arg(long = "simulate-ms", value_name = "MS", default_value_t = 0)]
    pub simulate_ms: u32,
    /// With --simulate: this rank's pairs get a fabricated low figure (a bad node, to see it found); RANK:RAIL only on that rail.
    #[arg(long = "simulate-slow", value_name = "RANK[:RAIL]", value_parser = slow_spot)]
    pub simulate_slow: Vec<pair::SlowSpot>,
}

/// Which schedule rank 0 builds.
#[derive(Debug, Clone)]
pub enum ScheduleChoice {
    /// `--pattern`.
    Pattern(Pattern),
    /// `--pairs-file`'s text.
    PairsFile(String),
}

/// What rank 0 alone decides: the schedule, the verdicts, the report.
#[derive(Debug, Clone)]
pub struct CoordinatorPlan {
    /// The schedule.
    pub schedule: ScheduleChoice,
    /// The verdicts' thresholds.
    pub thresholds: Thresholds,
    /// `--report DIR`.
    pub report: Option<PathBuf>,
    /// `--ignore-counter`: port error counters not judged.
    pub ignore_counters: Vec<String>,
    /// `--prom-worst`, `--report-compression`.
    pub report_options: report_files::ReportOptions,
    /// `--topology FILE`, read and checked (rank 0 only).
    pub topology: Option<engine::cluster::topology::Topology>,
    /// `--history DIR` and its rule (rank 0 only).
    pub history: Option<(PathBuf, engine::baseline::BaselineRule)>,
}

/// One rank's run, built once from the command line and environment.
#[derive(Debug, Clone)]
pub struct ClusterPlan {
    /// Rank and size, and what said so.
    pub launch: Launch,
    /// Where rank 0 listens.
    pub coordinator: Coordinator,
    /// What each pair runs (rank 0's is sent to all).
    pub test: PairTest,
    /// This rank's device.
    pub device: DeviceSelection,
    /// `--rails` (`-d DEV` is `--rails DEV`; neither: auto, or none
    /// under `--simulate`).
    pub rails: RailSpec,
    /// `--pair-address`.
    pub pair_address: Option<String>,
    /// The sysfs this rank reads: its rails, its ports' rate and error
    /// counters, its NICs' NUMA nodes.
    pub sysfs: crate::sysfs::Sysfs,
    /// Each rail's thread bound to its NIC's NUMA node: none under
    /// `--simulate` or when the process started restricted (taskset,
    /// numactl), as perftest leaves it; decided once, here, before
    /// anything is bound.
    pub numa: Option<crate::placement::NicNodeBinding>,
    /// `--rendezvous-timeout`.
    pub rendezvous_timeout: Duration,
    /// `--simulate-slow`.
    pub simulate_slow: Vec<pair::SlowSpot>,
    /// Whether a rank other than 0 prints its line and its rails (not
    /// the simulated ranks of `--simulate-ranks`' helper processes).
    pub print_line: bool,
    /// Rank 0's part.
    pub coordinating: CoordinatorPlan,
}

/// Most directions `--prom-worst` puts in `metrics.prom`: a few hundred
/// kB of series; more is what `pairs.jsonl` is for.
pub const MAX_PROM_WORST: usize = 10_000;

/// `--prom-worst K`: 0 to [`MAX_PROM_WORST`].
fn prom_worst(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(k) if k <= MAX_PROM_WORST => Ok(k),
        _ => Err(format!(
            "{s:?}: want a number of directions from 0 to {MAX_PROM_WORST} \
             (every direction is in pairs.jsonl)"
        )),
    }
}

/// `--simulate-slow`'s `RANK` or `RANK:RAIL`.
fn slow_spot(s: &str) -> Result<pair::SlowSpot, String> {
    let (rank, rail) = match s.split_once(':') {
        Some((r, k)) => (r, Some(k)),
        None => (s, None),
    };
    let num = |t: &str| {
        t.parse::<u32>()
            .map_err(|_| format!("'{s}' is not RANK or RANK:RAIL"))
    };
    Ok(pair::SlowSpot {
        rank: num(rank)?,
        rail: rail.map(num).transpose()?,
    })
}

impl ClusterArgs {
    /// The plan of this rank, from the flags and `env`.
    ///
    /// # Errors
    /// A usage error naming the flag or variable.
    pub fn plan(&self, env: launch::Env<'_>) -> Result<ClusterPlan, UsageError> {
        let usage = |e: &dyn std::fmt::Display| UsageError(e.to_string());
        let flags = RankFlags {
            rank: self.rank,
            size: self.size,
        };
        let launch = launch::detect(env, &flags).map_err(|e| usage(&e))?;
        // One rank is the node self-test: no coordinator.
        let coordinator = if launch.size == 1 {
            Coordinator {
                host: "127.0.0.1".into(),
                port: 0,
                source: CoordinatorSource::SelfTest,
            }
        } else {
            launch::coordinator(self.coordinator.as_deref(), env, &launch)
                .map_err(|e| usage(&e))?
                .ok_or_else(|| {
                    UsageError("--coordinator HOST:PORT: no coordinator is known".into())
                })?
        };
        let test = PairTest {
            size: self.message_size,
            duration_s: self.duration,
            qps: self.qps,
            rdma_cm: self.rdma_cm,
            timeout_s: self.timeout,
            latency: self.latency,
            lat_iters: self.lat_iters,
            percentile: self.percentile.clone(),
            simulate: self.simulate,
            simulate_ms: self.simulate_ms,
        };
        if let Some(p) = test.problem() {
            return Err(UsageError(p));
        }
        if self.rdma_cm && self.gid_index.is_some() {
            return Err(UsageError(
                "-x/--gid-index: rdma_cm (-R) picks the GID from the address".into(),
            ));
        }
        let (min_bw_gbps, rate_efficiency) = match self.expect_rate {
            None => (None, None),
            Some(ExpectRate::Auto) => (None, Some(self.min_efficiency)),
            Some(ExpectRate::Gbps(g)) => (Some(g * self.min_efficiency), None),
        };
        if !self.latency
            && (self.max_latency.is_some()
                || self.percentile != "median"
                || self.lat_iters != LAT_ITERATIONS)
        {
            return Err(UsageError(
                "--max-latency, --percentile and -n/--iters are for latency: add --latency".into(),
            ));
        }
        if let Some(bad) = self
            .ignore_counters
            .iter()
            .find(|c| c.is_empty() || c.trim_end_matches('*').contains('*'))
        {
            return Err(UsageError(format!(
                "--ignore-counter {bad:?}: a counter's name, e.g. hw_counters/duplicate_request, \
                 or a prefix ending in *"
            )));
        }
        if !(self.relative_lat.is_finite() && self.relative_lat >= 1.0) {
            return Err(UsageError(format!(
                "--relative-lat {}: a factor of at least 1",
                self.relative_lat
            )));
        }
        if !(self.min_efficiency > 0.0 && self.min_efficiency <= 1.0) {
            return Err(UsageError(format!(
                "--min-efficiency {}: a fraction above 0, at most 1",
                self.min_efficiency
            )));
        }
        if !(self.relative_bw > 0.0 && self.relative_bw <= 1.0) {
            return Err(UsageError(format!(
                "--relative-bw {}: a fraction above 0, at most 1",
                self.relative_bw
            )));
        }
        let schedule = match &self.pairs_file {
            Some(path) => {
                if self.pattern != "all-pairs" {
                    return Err(UsageError(
                        "--pairs-file and --pattern: give one of them".into(),
                    ));
                }
                // Only rank 0 reads it (it may exist on rank 0's node only).
                if launch.rank == 0 {
                    ScheduleChoice::PairsFile(std::fs::read_to_string(path).map_err(|e| {
                        UsageError(format!("--pairs-file {path:?}: cannot read it: {e}"))
                    })?)
                } else {
                    ScheduleChoice::PairsFile(String::new())
                }
            }
            None => ScheduleChoice::Pattern(
                self.pattern
                    .parse()
                    .map_err(|e| UsageError(format!("--pattern: {e}")))?,
            ),
        };
        // Only rank 0 reads it (it may exist on rank 0's node only); a
        // file that is no topology is a usage error naming its line.
        let topology = match &self.topology {
            Some(path) if launch.rank == 0 => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    UsageError(format!(
                        "--topology {}: cannot read it: {e}",
                        path.display()
                    ))
                })?;
                Some(
                    engine::cluster::topology::Topology::parse(&text)
                        .map_err(|e| UsageError(format!("--topology {}: {e}", path.display())))?,
                )
            }
            _ => None,
        };
        if let Some(bad) = self.simulate_slow.iter().find(|s| s.rank >= launch.size) {
            return Err(UsageError(format!(
                "--simulate-slow {}: the job has {} ranks",
                bad.rank, launch.size
            )));
        }
        if !self.simulate_slow.is_empty() && !self.simulate {
            return Err(UsageError("--simulate-slow needs --simulate".into()));
        }
        let rails = match (&self.rails, &self.device.ib_dev) {
            (Some(_), Some(_)) => {
                return Err(UsageError(
                    "--rails and -d/--ib-dev both name this node's devices: give one".into(),
                ));
            }
            (Some(r), None) => rails::parse_spec(r).map_err(|e| usage(&e))?,
            (None, Some(d)) => RailSpec::Named(vec![RailName {
                device: d.clone(),
                port: self.device.ib_port,
            }]),
            // --simulate without a device: no rails (the figures are made up).
            (None, None) if self.simulate => RailSpec::Named(Vec::new()),
            (None, None) => RailSpec::Auto,
        };
        if self.report.is_none() {
            let given = [
                ("--prom-worst", self.prom_worst.is_some()),
                ("--report-compression", self.report_compression.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
                return Err(UsageError(format!(
                    "{flag} shapes the report: add --report DIR"
                )));
            }
        }
        if self.history.is_none() {
            let given = [
                ("--baseline-drop", self.baseline_drop.is_some()),
                ("--baseline-runs", self.baseline_runs.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
                return Err(UsageError(format!(
                    "{flag} shapes the history: add --history DIR"
                )));
            }
        }
        let mut rule = engine::baseline::BaselineRule::default();
        if let Some(d) = self.baseline_drop {
            if !(d > 0.0 && d < 1.0) {
                return Err(UsageError(format!(
                    "--baseline-drop {d}: want a fraction above 0 and below 1 (e.g. 0.9)"
                )));
            }
            rule.drop = d;
        }
        if let Some(k) = self.baseline_runs {
            if !(1..=16).contains(&k) {
                return Err(UsageError(format!("--baseline-runs {k}: want 1 to 16")));
            }
            rule.runs = k;
        }
        if launch.size == 1 && self.history.is_some() {
            return Err(UsageError(
                "--history: one rank is the node self-test; its rails against their own past                  is `rdmaperf health --active`"
                    .into(),
            ));
        }
        if let Some(dir) = &self.history
            && launch.rank == 0
        {
            history_files::open_dir(dir)?;
        }
        if launch.size == 1 && self.report.is_some() {
            return Err(UsageError(
                "--report: one rank is the node self-test, which prints its verdicts and \
                 writes no report"
                    .into(),
            ));
        }
        // Last, once every flag is good: rank 0 creates the report's
        // directory (as `mkdir -p`) and checks it can write there.
        if let Some(dir) = &self.report
            && launch.rank == 0
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| UsageError(format!("--report: cannot create {dir:?}: {e}")))?;
            crate::atomic_file::check_writable("--report", &dir.join("summary.json"))?;
        }
        let sysfs = crate::sysfs::Sysfs::at(&self.sysfs_root);
        Ok(ClusterPlan {
            launch,
            coordinator,
            test,
            device: DeviceSelection {
                name: self.device.ib_dev.clone(),
                port: self.device.ib_port,
                gid_index: self.gid_index,
            },
            rails,
            pair_address: self.pair_address.clone(),
            sysfs: sysfs.clone(),
            numa: if self.simulate {
                None
            } else {
                crate::placement::NicNodeBinding::unless_restricted(&sysfs)
            },
            rendezvous_timeout: self.rendezvous_timeout,
            simulate_slow: self.simulate_slow.clone(),
            print_line: true,
            coordinating: CoordinatorPlan {
                schedule,
                topology,
                thresholds: Thresholds {
                    min_bw_gbps,
                    rate_efficiency,
                    max_lat_us: self.max_latency,
                    relative_bw: self.relative_bw,
                    relative_lat: self.relative_lat,
                },
                report: self.report.clone(),
                history: self.history.clone().map(|d| (d, rule)),
                ignore_counters: self.ignore_counters.clone(),
                report_options: report_files::ReportOptions {
                    prom_worst: self
                        .prom_worst
                        .unwrap_or(engine::cluster::report::DEFAULT_PROM_WORST),
                    compression: self.report_compression.unwrap_or_default(),
                },
            },
        })
    }
}

/// Runs this rank (or, with `--simulate-ranks N`, a whole simulated job;
/// with `--simulate-fleet`, one helper process of it);
/// returns the exit code.
///
/// # Errors
/// Usage errors (exit 2) and failures before the run could start.
pub fn run(args: &ClusterArgs) -> anyhow::Result<u8> {
    crate::stop::install()?;
    if let Some(range) = args.simulate_fleet {
        return simulated::run_fleet(args, range);
    }
    if let Some(n) = args.simulate_ranks {
        return simulated::run(args, n);
    }
    if !(args.simulate_absent.is_empty()
        && args.simulate_die.is_empty()
        && args.simulate_mute.is_empty()
        && args.simulate_hosts.is_none()
        && args.simulate_slow_switch.is_empty())
    {
        return Err(UsageError(
            "--simulate-absent, --simulate-die, --simulate-mute, --simulate-hosts and \
             --simulate-slow-switch need --simulate-ranks"
                .into(),
        )
        .into());
    }
    let env = |name: &str| std::env::var(name).ok();
    let plan = args.plan(&env)?;
    if plan.launch.size == 1 {
        eprintln!(
            "rdmaperf cluster: one rank ({}): the node self-test, rail k against rail k+1",
            plan.launch.source
        );
        return selftest::run(&plan);
    }
    eprintln!(
        "rdmaperf cluster: rank {} of {} ({}); coordinator {}:{} ({})",
        plan.launch.rank,
        plan.launch.size,
        plan.launch.source,
        plan.coordinator.host,
        plan.coordinator.port,
        plan.coordinator.source,
    );
    rank::run(&plan)
}
