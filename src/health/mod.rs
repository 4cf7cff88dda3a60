//! `rdmaperf health`: the node check a scheduler runs — Slurm's
//! `HealthCheckProgram` every few minutes, a `Prolog` before every job, a
//! node-problem-detector plugin — with one verdict and its reasons.
//!
//! The command line becomes a [`HealthPlan`] once ([`HealthArgs::plan`]);
//! [`run`] then reads the ports and counters ([`readings`]), keeps the
//! state ([`state_dir`]), judges with `engine::health`, runs the active
//! self-test within the budget ([`active`]) and drains or resumes the Slurm
//! node ([`slurm`]). The rules and their sources: docs/health.md.

pub mod active;
pub mod readings;
pub mod slurm;
pub mod state_dir;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use engine::cluster::rails::{self, RailSpec};
use engine::fabric::link::ExpectRate;
use engine::health::passive::{self, Limits};
use engine::health::state::Bounds;
use engine::health::{Check, HealthReport, parse_duration};

use crate::exit::UsageError;
use crate::sysfs::Sysfs;

/// The default `--state-dir`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/rdmaperf";
/// `--budget`'s default with `--active`: a Slurm prolog is expected to be
/// done within `MessageTimeout`, 10 s by default.
pub const ACTIVE_BUDGET_S: f64 = 10.0;
/// `--budget`'s default without `--active` (the passive checks take a
/// few milliseconds; this only bounds a sysfs that hangs).
pub const PASSIVE_BUDGET_S: f64 = 2.0;
/// The largest `--budget`: Slurm kills a `HealthCheckProgram` after 60 s.
pub const MAX_BUDGET_S: f64 = 3_600.0;

/// How the verdict is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// A headline and a line per check.
    #[default]
    Text,
    /// LBNL NHC's convention: one line `rdmaperf: <check>: <message>` on FAIL or UNKNOWN, nothing otherwise.
    Nhc,
    /// Kubernetes node-problem-detector's custom plugin: the message on stdout (at most 80 characters), exit 0 OK, 1 problem, 2 unknown.
    Npd,
}

/// `rdmaperf health` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// This node's rails: auto (every port of the node's main link layer, ACTIVE or not) or DEV[:PORT],...
    #[arg(long = "rails", value_name = "auto|DEV[:PORT],...")]
    pub rails: Option<String>,
    /// How many rails there must be.
    #[arg(long = "expect-rails", value_name = "N")]
    pub expect_rails: Option<usize>,
    /// The rate every rail should run at: auto (the fastest port of the same kind here) or Gb/s.
    #[arg(long = "expect-rate", value_name = "auto|GBPS")]
    pub expect_rate: Option<ExpectRate>,
    /// Also run the node self-test over the rails (rail k against rail k+1, both directions) and judge each direction against its own past.
    #[arg(long = "active")]
    pub active: bool,
    /// Bound on the whole check, seconds (default 10 with --active, 2 without); what cannot finish within it is UNKNOWN, never FAIL.
    #[arg(long = "budget", value_name = "SECONDS")]
    pub budget: Option<f64>,
    /// Where the state between runs is kept (counter snapshots, flaps, past active figures); created owner-only.
    #[arg(long = "state-dir", value_name = "DIR", default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// The window link flaps are counted in (s, m, h, d).
    #[arg(long = "flap-window", value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
    pub flap_window: u64,
    /// Flaps in the window that warn.
    #[arg(long = "flap-warn", value_name = "N", default_value_t = 2)]
    pub flap_warn: u64,
    /// Flaps in the window that fail.
    #[arg(long = "flap-fail", value_name = "N", default_value_t = 5)]
    pub flap_fail: u64,
    /// symbol_error counts per hour that fail.
    #[arg(long = "max-symbol-errors", value_name = "N", default_value_t = 120)]
    pub max_symbol_errors: u64,
    /// link_error_recovery counts per hour that fail.
    #[arg(long = "max-link-recoveries", value_name = "N", default_value_t = 300)]
    pub max_link_recoveries: u64,
    /// An error counter not to warn about when it rises (its name, e.g. duplicate_request, or counters/NAME, hw_counters/NAME; repeatable).
    #[arg(long = "ignore-counter", value_name = "NAME")]
    pub ignore_counters: Vec<String>,
    /// With --active: a direction below this fraction of its own baseline (the median of its last --baseline-runs passing runs) fails.
    #[arg(long = "baseline-drop", value_name = "FRACTION", default_value_t = 0.9)]
    pub baseline_drop: f64,
    /// With --active: how many passing runs a baseline is the median of (and needs before it judges).
    #[arg(long = "baseline-runs", value_name = "K", default_value_t = 5)]
    pub baseline_runs: usize,
    /// Forget every rail's past active figures (after a deliberate change: new NICs, cables, firmware).
    #[arg(long = "baseline-reset")]
    pub baseline_reset: bool,
    /// With --active: an absolute floor every direction must reach, Gb/s.
    #[arg(long = "min-bw", value_name = "GBPS")]
    pub min_bw: Option<f64>,
    /// With --active: message size of the test (default 1 MiB).
    #[arg(short = 's', long = "size", value_name = "BYTES", value_parser = crate::args::size_arg)]
    pub size: Option<u64>,
    /// With --active: seconds each direction runs (default: what the budget allows).
    #[arg(short = 'D', long = "duration", value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub duration: Option<u32>,
    /// With --active: the GID index (-x).
    #[arg(short = 'x', long = "gid-index", value_name = "INDEX")]
    pub gid_index: Option<u32>,
    /// How the verdict is printed.
    #[arg(long = "format", value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Print the full record as one JSON document instead.
    #[arg(long = "json", conflicts_with = "format")]
    pub json: bool,
    /// Drain this Slurm node on FAIL (reason "rdmaperf: ..."), resume it on PASS only when rdmaperf drained it, nothing on UNKNOWN.
    #[arg(long = "slurm-drain")]
    pub slurm_drain: bool,
    /// Where sysfs is.
    #[command(flatten)]
    pub sysfs: crate::fabric::SysfsArgs,
}

/// One health run, built once from the flags and the environment.
#[derive(Debug, Clone)]
pub struct HealthPlan {
    /// The rails.
    pub rails: RailSpec,
    /// The passive checks' thresholds.
    pub limits: Limits,
    /// The active part, when `--active`.
    pub active: Option<active::ActivePlan>,
    /// The whole check's bound.
    pub budget: Duration,
    /// `--state-dir`.
    pub state_dir: PathBuf,
    /// `--baseline-reset`.
    pub baseline_reset: bool,
    /// The output.
    pub format: Format,
    /// `--json`.
    pub json: bool,
    /// Drain/resume as this Slurm node.
    pub slurm_node: Option<String>,
    /// This node's name (Slurm's, else the short host name).
    pub node: String,
    /// The sysfs read.
    pub sysfs: Sysfs,
}

impl HealthArgs {
    /// The plan, from the flags and `SLURMD_NODENAME`.
    ///
    /// # Errors
    /// A usage error naming the flag.
    pub fn plan(&self, slurmd_nodename: Option<&str>) -> Result<HealthPlan, UsageError> {
        let rails = match &self.rails {
            Some(r) => rails::parse_spec(r).map_err(|e| UsageError(format!("--rails: {e}")))?,
            None => RailSpec::Auto,
        };
        let default_budget = if self.active {
            ACTIVE_BUDGET_S
        } else {
            PASSIVE_BUDGET_S
        };
        let budget = self.budget.unwrap_or(default_budget);
        if !(budget.is_finite() && budget > 0.0 && budget <= MAX_BUDGET_S) {
            return Err(UsageError(format!(
                "--budget {budget}: want seconds above 0, at most {MAX_BUDGET_S}"
            )));
        }
        if self.flap_warn == 0 || self.flap_fail == 0 || self.flap_warn > self.flap_fail {
            return Err(UsageError(format!(
                "--flap-warn {} / --flap-fail {}: want 1 <= warn <= fail",
                self.flap_warn, self.flap_fail
            )));
        }
        if self.max_symbol_errors == 0 || self.max_link_recoveries == 0 {
            return Err(UsageError(
                "--max-symbol-errors / --max-link-recoveries: want a count of 1 or more".into(),
            ));
        }
        let needs_active = [
            ("--min-bw", self.min_bw.is_some()),
            ("-s/--size", self.size.is_some()),
            ("-D/--duration", self.duration.is_some()),
            ("-x/--gid-index", self.gid_index.is_some()),
        ];
        if !self.active
            && let Some((flag, _)) = needs_active.iter().find(|(_, given)| *given)
        {
            return Err(UsageError(format!(
                "{flag} shapes the active test: add --active"
            )));
        }
        let active = if self.active {
            Some(active::ActivePlan::new(self)?)
        } else {
            None
        };
        let node = slurmd_nodename
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(short_host_name);
        Ok(HealthPlan {
            rails,
            limits: Limits {
                expect_rate: self.expect_rate.unwrap_or_default(),
                expect_rails: self.expect_rails,
                flap_window_s: self.flap_window,
                flap_warn: self.flap_warn,
                flap_fail: self.flap_fail,
                max_symbol_errors: self.max_symbol_errors,
                max_link_recoveries: self.max_link_recoveries,
                ignore_counters: self.ignore_counters.clone(),
            },
            active,
            budget: Duration::from_secs_f64(budget),
            state_dir: self.state_dir.clone(),
            baseline_reset: self.baseline_reset,
            format: self.format,
            json: self.json,
            slurm_node: self.slurm_drain.then(|| node.clone()),
            node,
            sysfs: self.sysfs.sysfs(),
        })
    }
}

/// The kernel's host name up to its first dot (Slurm's node names are
/// short).
fn short_host_name() -> String {
    let host = crate::cluster::rank::host_name();
    host.split('.').next().unwrap_or(&host).to_owned()
}

/// The `--json` document.
#[derive(Debug, serde::Serialize)]
struct HealthDocument<'a> {
    schema_version: u32,
    kind: &'static str,
    #[serde(flatten)]
    report: &'a HealthReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    slurm: Option<&'a slurm::DrainOutcome>,
    state_file: Option<String>,
}

/// Runs `rdmaperf health`; the exit code (0 PASS/WARN, 3 FAIL, 5 UNKNOWN;
/// with `--format npd`, 0/1/2).
///
/// # Errors
/// Usage errors (exit 2); stdout closed.
pub fn run(args: &HealthArgs) -> anyhow::Result<u8> {
    let started = Instant::now();
    let plan = args.plan(std::env::var("SLURMD_NODENAME").ok().as_deref())?;
    let deadline = started + plan.budget;
    watchdog(&plan);
    let now = readings::Clock::read();
    let mut notes = Vec::new();

    // The state, if a directory can be had.
    let state_dir = match crate::state_dir::StateDir::open(&plan.state_dir) {
        Ok(d) => Some(d),
        Err(e) => {
            notes.push(format!(
                "no state kept: {e} (give --state-dir): flaps and error counts are from this \
                 run only"
            ));
            None
        }
    };
    let mut state = match &state_dir {
        Some(d) => {
            let (s, note) = state_dir::load(d, &plan.node, now.time_s);
            notes.extend(note);
            s
        }
        None => engine::health::state::HealthState::new(&plan.node),
    };
    if plan.baseline_reset && !state.baselines.is_empty() {
        notes.push(format!(
            "--baseline-reset: forgot the past figures of {} directions",
            state.baselines.len()
        ));
        state.baselines.clear();
    }

    // Passive.
    let devices = plan.sysfs.devices(None, None).unwrap_or_default();
    let rails = passive::health_rails(&devices, &plan.rails);
    let snapshot = readings::snapshot(&plan.sysfs, &rails, &now);
    let outcome = passive::check(passive::PassiveInput {
        devices: &devices,
        rails: &rails,
        limits: &plan.limits,
        now: &snapshot,
        history: &state.snapshots,
        events: &state.flaps,
    });
    let mut checks: Vec<Check> = outcome.checks;
    notes.extend(outcome.notes);
    let rail_figures = outcome.figures;
    let bounds = Bounds::for_window(plan.limits.flap_window_s);
    let mut new_events = outcome.new_events;

    // Active, within what is left of the budget.
    let mut directions = Vec::new();
    if let Some(active_plan) = &plan.active {
        let (active_checks, figures) = active::check(
            active_plan,
            &plan.sysfs,
            &devices,
            &rails,
            deadline,
            &mut state,
            now.time_s,
        );
        checks.extend(active_checks);
        directions = figures;
    }
    // The snapshot kept is read after the active test, so that the next
    // run does not blame the retries our own traffic caused; a flap during
    // the test is still counted.
    let kept = if plan.active.is_some() {
        let after_devices = plan.sysfs.devices(None, None).unwrap_or_default();
        let after_rails = passive::health_rails(&after_devices, &plan.rails);
        let after = readings::snapshot(&plan.sysfs, &after_rails, &readings::Clock::read());
        for d in engine::health::counters::flaps_between(&snapshot, &after) {
            if d.flaps > 0 {
                new_events.push(engine::health::counters::FlapEvent {
                    port: d.port,
                    flaps: d.flaps,
                    time_s: after.time_s,
                    boot_id: after.boot_id.clone(),
                    uptime_s: after.uptime_s,
                });
            }
        }
        after
    } else {
        snapshot
    };
    state.record(kept, new_events, &bounds);
    state.trim(&bounds);

    let mut report = HealthReport::new(&plan.node, now.time_s, plan.active.is_some(), checks);
    report.notes = notes;
    report.rails = rail_figures;
    report.directions = directions;
    report.seconds = started.elapsed().as_secs_f64();
    state.last = Some(report.clone());
    if let Some(d) = &state_dir
        && let Err(e) = state_dir::save(d, &state)
    {
        report.notes.push(e);
    }
    let drained = plan
        .slurm_node
        .as_deref()
        .map(|node| slurm::apply(node, report.verdict, report.reason().as_deref()));
    if let Some(d) = &drained {
        report
            .notes
            .push(format!("slurm: {}: {}", d.action, d.detail));
    }
    print(&plan, &report, drained.as_ref(), state_dir.as_ref())?;
    Ok(match (plan.format, plan.json) {
        (Format::Npd, false) => report.verdict.npd_exit_code(),
        _ => report.verdict.exit_code(),
    })
}

/// What is left after the budget for saving the state and printing.
const GRACE: Duration = Duration::from_secs(2);

/// Bounds the whole run: past the budget (plus [`GRACE`], plus two
/// `scontrol` calls with `--slurm-drain`), whatever hangs — a sysfs read,
/// the disk — the process says UNKNOWN in the chosen format and exits
/// with its code. The active test has its own deadline inside the budget,
/// so this fires only when something else hangs.
fn watchdog(plan: &HealthPlan) {
    let mut bound = plan.budget + GRACE;
    if plan.slurm_node.is_some() {
        bound += 2 * slurm::SCONTROL_TIMEOUT;
    }
    let (node, format, json) = (plan.node.clone(), plan.format, plan.json);
    let seconds = bound.as_secs_f64();
    let _ = std::thread::Builder::new()
        .name("health-watchdog".into())
        .spawn(move || {
            std::thread::sleep(bound);
            let message = format!("the check did not finish within {seconds:.0} s (--budget)");
            let mut report = HealthReport::new(
                &node,
                0,
                false,
                vec![Check::new(
                    "budget",
                    None,
                    engine::health::Status::Unknown,
                    message,
                )],
            );
            report.seconds = seconds;
            let text = if json {
                serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
            } else {
                match format {
                    Format::Text => report.text(),
                    Format::Nhc => report.nhc_line().unwrap_or_default() + "\n",
                    Format::Npd => report.npd_message() + "\n",
                }
            };
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
            let code = match (format, json) {
                (Format::Npd, false) => report.verdict.npd_exit_code(),
                _ => report.verdict.exit_code(),
            };
            std::process::exit(i32::from(code));
        });
}

fn print(
    plan: &HealthPlan,
    report: &HealthReport,
    drained: Option<&slurm::DrainOutcome>,
    state_dir: Option<&crate::state_dir::StateDir>,
) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(crate::output::Stdout);
    if plan.json {
        let doc = HealthDocument {
            schema_version: engine::results::record::SCHEMA_VERSION,
            kind: "health",
            report,
            slurm: drained,
            state_file: state_dir.map(|d| d.file(state_dir::STATE_FILE).display().to_string()),
        };
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        match plan.format {
            Format::Text => write!(out, "{}", report.text())?,
            Format::Nhc => {
                if let Some(line) = report.nhc_line() {
                    writeln!(out, "{line}")?;
                }
                // The details for a person reading slurmd's log.
                for n in &report.notes {
                    eprintln!("rdmaperf: health: note: {n}");
                }
            }
            Format::Npd => writeln!(out, "{}", report.npd_message())?,
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: HealthArgs,
    }

    fn plan(argv: &[&str]) -> Result<HealthPlan, UsageError> {
        let mut full = vec!["health"];
        full.extend_from_slice(argv);
        Cli::try_parse_from(full).unwrap().args.plan(Some("node7"))
    }

    #[test]
    fn defaults_follow_the_sources_and_bad_values_name_their_flag() {
        let p = plan(&[]).unwrap();
        assert_eq!(p.budget, Duration::from_secs(2));
        assert_eq!(p.limits.flap_window_s, 86_400);
        assert_eq!((p.limits.flap_warn, p.limits.flap_fail), (2, 5));
        assert_eq!(p.node, "node7");
        assert!(p.slurm_node.is_none());
        let a = plan(&["--active", "--slurm-drain"]).unwrap();
        assert_eq!(a.budget, Duration::from_secs(10));
        assert_eq!(a.slurm_node.as_deref(), Some("node7"));
        for (argv, flag) in [
            (&["--budget", "0"][..], "--budget"),
            (&["--flap-warn", "6"][..], "--flap-warn"),
            (&["--min-bw", "100"][..], "--min-bw"),
            (
                &["--active", "--baseline-drop", "1.5"][..],
                "--baseline-drop",
            ),
            (&["--active", "--baseline-runs", "0"][..], "--baseline-runs"),
            (&["--rails", "mlx5_0,mlx5_0"][..], "--rails"),
        ] {
            let e = plan(argv).unwrap_err();
            assert!(e.0.contains(flag), "{argv:?}: {}", e.0);
        }
    }
}
