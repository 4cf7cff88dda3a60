//! `rdmaperf health --active`: the node self-test of `rdmaperf cluster`
//! with one rank (rail k against rail k+1, both directions, the pairs of a
//! round at once: `cluster::selftest::measure_rails`) inside the health
//! run's budget, each direction judged on its own (an error, `--min-bw`,
//! half the node's best direction) and against its own past
//! (`engine::baseline`: below `--baseline-drop` × the median of its last
//! `--baseline-runs` passing runs fails).
//!
//! The budget: each direction's seconds are what the budget leaves after
//! a second of setup per direction (at least 1 s); the test runs in a
//! thread and is waited for until the deadline. Past it, the active
//! check is UNKNOWN — never FAIL — and the process ends without it.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use engine::baseline::{BaselineJudgement, BaselineRule, Run};
use engine::cluster::pair_test::PairTest;
use engine::cluster::rails::{self, Rail, RailName, RailSpec};
use engine::cluster::schedule;
use engine::cluster::verdict::{self, Measurement, Outcome, Thresholds};
use engine::fabric::ports::DeviceState;
use engine::health::passive::HealthRail;
use engine::health::state::HealthState;
use engine::health::{Check, DirectionFigures, Status};

use super::HealthArgs;
use crate::cluster::selftest::{RailTest, measure_rails, rail_facts};
use crate::exit::UsageError;
use crate::placement::NicNodeBinding;
use crate::sysfs::Sysfs;

/// The active test's message size when `-s` is not given (cluster mode's).
pub const DEFAULT_SIZE: u64 = 1 << 20;
/// Seconds of setup counted per direction (open, register, connect) when
/// the budget is shared out.
const SETUP_S: f64 = 1.0;
/// The part of the budget kept for the end (judging, the state file,
/// `scontrol`).
const MARGIN: Duration = Duration::from_millis(500);
/// The health check's relative rule: a direction under half of the
/// node's best fails (cluster mode's 0.93 of the best is for a job's
/// many pairs; between a node's own rails, run every few minutes, noise
/// would fail healthy nodes — aznhc added retries for that).
pub const RELATIVE_BW: f64 = 0.5;

/// The active part of a health run.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivePlan {
    /// `-s`.
    pub size: u64,
    /// `-D`, or `None`: from the budget.
    pub duration_s: Option<u32>,
    /// `-x`.
    pub gid_index: Option<u32>,
    /// `--min-bw`.
    pub min_bw_gbps: Option<f64>,
    /// `--baseline-drop`, `--baseline-runs`.
    pub rule: BaselineRule,
}

impl ActivePlan {
    /// From the flags.
    ///
    /// # Errors
    /// A usage error naming the flag.
    pub fn new(args: &HealthArgs) -> Result<Self, UsageError> {
        if !(args.baseline_drop > 0.0 && args.baseline_drop < 1.0) {
            return Err(UsageError(format!(
                "--baseline-drop {}: want a fraction above 0 and below 1 (e.g. 0.9)",
                args.baseline_drop
            )));
        }
        if args.baseline_runs == 0 || args.baseline_runs > 32 {
            return Err(UsageError(format!(
                "--baseline-runs {}: want 1 to 32",
                args.baseline_runs
            )));
        }
        if let Some(b) = args.min_bw
            && !(b.is_finite() && b > 0.0)
        {
            return Err(UsageError(format!("--min-bw {b}: want Gb/s above 0")));
        }
        let size = args.size.unwrap_or(DEFAULT_SIZE);
        Ok(Self {
            size,
            duration_s: args.duration,
            gid_index: args.gid_index,
            min_bw_gbps: args.min_bw,
            rule: BaselineRule {
                drop: args.baseline_drop,
                runs: args.baseline_runs,
            },
        })
    }
}

/// Runs the self-test over the ACTIVE rails before `deadline` and judges
/// it; updates each direction's past in `state`.
pub fn check(
    plan: &ActivePlan,
    sysfs: &Sysfs,
    devices: &[DeviceState],
    rails: &[HealthRail],
    deadline: Instant,
    state: &mut HealthState,
    now_s: i64,
) -> (Vec<Check>, Vec<DirectionFigures>) {
    let unknown = |msg: String| {
        (
            vec![Check::new("active", None, Status::Unknown, msg)],
            Vec::new(),
        )
    };
    let names: Vec<RailName> = rails
        .iter()
        .filter(|r| r.state.as_ref().is_some_and(|p| p.state_id() == Some(4)))
        .map(|r| RailName {
            device: r.device.clone(),
            port: Some(r.port),
        })
        .collect();
    if names.len() < 2 {
        return unknown(format!(
            "rail k against rail k+1 needs 2 ACTIVE rails, {} here",
            names.len()
        ));
    }
    let mut selected = match rails::select(devices, &RailSpec::Named(names)) {
        Ok(s) => s.rails,
        Err(e) => return unknown(format!("cannot take the rails: {e}")),
    };
    for r in &mut selected {
        r.address = crate::cluster::rank::rail_address(devices, r);
    }
    let n = selected.len() as u32;
    let sched = match schedule::ring(n) {
        Ok(s) => s,
        Err(e) => return unknown(format!("cannot plan the rails' pairs: {e}")),
    };
    // Rounds run one after another, the two directions of a pair too.
    let slots = 2 * sched.rounds.len();
    let left = deadline
        .saturating_duration_since(Instant::now())
        .saturating_sub(MARGIN)
        .as_secs_f64();
    let duration_s = plan
        .duration_s
        .unwrap_or_else(|| direction_seconds(left, slots));
    let iwarp = devices
        .iter()
        .filter(|d| selected.iter().any(|r| r.device == d.name))
        .any(DeviceState::is_iwarp);
    let test = PairTest {
        size: plan.size,
        duration_s,
        qps: 1,
        rdma_cm: iwarp,
        timeout_s: (left.ceil() as u32).clamp(1, 60),
        latency: false,
        lat_iters: engine::cluster::pair_test::LAT_ITERATIONS,
        percentile: "median".into(),
        simulate: false,
        simulate_ms: 0,
    };
    if let Some(p) = test.problem() {
        return unknown(format!("the test cannot run: {p}"));
    }
    let numa = NicNodeBinding::unless_restricted(sysfs);
    let gid_index = plan.gid_index;
    let (tx, rx) = mpsc::channel();
    let rails_for_test = selected.clone();
    let sched_for_test = sched.clone();
    let spawned = std::thread::Builder::new()
        .name("health-active".into())
        .spawn(move || {
            let rt = RailTest {
                test: &test,
                gid_index,
                numa: numa.as_ref(),
            };
            let _ = tx.send(measure_rails(&rt, &rails_for_test, &sched_for_test));
        });
    if let Err(e) = spawned {
        return unknown(format!("cannot start the test: {e}"));
    }
    let wait = deadline
        .saturating_duration_since(Instant::now())
        .saturating_sub(MARGIN / 2);
    let measured = match rx.recv_timeout(wait) {
        Ok(m) => m,
        Err(_) => {
            return unknown(format!(
                "the self-test of {n} rails ({} directions of {duration_s} s) did not finish \
                 within the budget: raise --budget or lower -D",
                2 * sched.pair_count()
            ));
        }
    };
    judge(plan, &selected, &measured, state, now_s)
}

/// Seconds each direction runs when `-D` is not given: what `left_s`
/// leaves for `slots` directions run one after another, after
/// [`SETUP_S`] each; at least 1 (perftest's `-D` is whole seconds), at
/// most 60.
pub fn direction_seconds(left_s: f64, slots: usize) -> u32 {
    let share = (left_s / slots.max(1) as f64 - SETUP_S).floor();
    if share.is_finite() {
        share.clamp(1.0, 60.0) as u32
    } else {
        1
    }
}

/// Each direction on its own and against its past; records its run.
fn judge(
    plan: &ActivePlan,
    rails: &[Rail],
    measured: &[Measurement],
    state: &mut HealthState,
    now_s: i64,
) -> (Vec<Check>, Vec<DirectionFigures>) {
    let facts = rail_facts(rails);
    let thresholds = Thresholds {
        min_bw_gbps: plan.min_bw_gbps,
        relative_bw: RELATIVE_BW,
        ..Thresholds::default()
    };
    let v = verdict::judge_with(rails.len() as u32, &[], measured, &thresholds, &facts);
    let mut checks = Vec::new();
    let mut figures = Vec::new();
    let key_of = |r: &Rail| format!("{}/{}", r.device, r.port);
    for (m, d) in measured.iter().zip(&v.directions) {
        let (from, to) = (
            key_of(&rails[m.from as usize]),
            key_of(&rails[m.to as usize]),
        );
        let key = format!("{from} -> {to}");
        let subject = Some(key.clone());
        match &m.outcome {
            Outcome::Measured { bw_gbps, .. } => {
                let figure = verdict::gbps(*bw_gbps);
                if d.pass {
                    checks.push(Check::new(
                        "active",
                        subject.clone(),
                        Status::Pass,
                        format!("{figure} Gb/s"),
                    ));
                } else {
                    let why: Vec<String> = d.reasons.iter().map(|r| r.line()).collect();
                    checks.push(Check::new(
                        "active",
                        subject.clone(),
                        Status::Fail,
                        format!("{figure} Gb/s: {}", why.join("; ")),
                    ));
                }
                let history = state.baselines.entry(key.clone()).or_default();
                let judged = history.judge(*bw_gbps, &plan.rule);
                let below = matches!(judged, BaselineJudgement::Below { .. });
                figures.push(DirectionFigures {
                    from,
                    to,
                    gbps: *bw_gbps,
                    baseline_gbps: match &judged {
                        BaselineJudgement::Within { baseline_gbps, .. }
                        | BaselineJudgement::Below { baseline_gbps, .. } => Some(*baseline_gbps),
                        BaselineJudgement::Building { .. } => None,
                    },
                });
                checks.push(baseline_check(&key, &judged, *bw_gbps, &plan.rule));
                history.record(
                    Run {
                        time_s: now_s,
                        gbps: *bw_gbps,
                        pass: d.pass && !below,
                    },
                    &plan.rule,
                );
            }
            Outcome::Error { error } => checks.push(Check::new(
                "active",
                subject,
                Status::Fail,
                format!("error: {error}"),
            )),
            Outcome::PeerMissing => checks.push(Check::new(
                "active",
                subject,
                Status::Unknown,
                "not measured",
            )),
        }
    }
    (checks, figures)
}

/// The baseline check of one direction.
fn baseline_check(key: &str, judged: &BaselineJudgement, gbps: f64, rule: &BaselineRule) -> Check {
    let subject = Some(key.to_owned());
    match judged {
        BaselineJudgement::Building { have, need } => Check::new(
            "baseline",
            subject,
            Status::Pass,
            format!(
                "building: {have} of {need} passing runs ({} Gb/s now)",
                verdict::gbps(gbps)
            ),
        ),
        BaselineJudgement::Within {
            ratio,
            baseline_gbps,
            runs,
        } => Check::new(
            "baseline",
            subject,
            Status::Pass,
            format!(
                "{} Gb/s, {ratio:.2} x its baseline {} Gb/s (the median of its last {runs} \
                 passing runs; fails below {})",
                verdict::gbps(gbps),
                verdict::gbps(*baseline_gbps),
                rule.drop
            ),
        ),
        BaselineJudgement::Below { .. } => {
            let line = judged
                .line(key)
                .unwrap_or_else(|| "below its baseline".into());
            // The line names the direction first; the check's subject says it.
            let message = line
                .strip_prefix(&format!("{key}: "))
                .unwrap_or(&line)
                .to_owned();
            Check::new("baseline", subject, Status::Fail, message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_rails_fit_the_default_budget_of_a_prolog() {
        // Rail k against k+1 on 8 rails: the ring's rounds, two
        // directions each, one after another.
        let slots = 2 * schedule::ring(8).unwrap().rounds.len();
        let left = super::super::ACTIVE_BUDGET_S - MARGIN.as_secs_f64();
        let d = direction_seconds(left, slots);
        assert_eq!((slots, d), (4, 1));
        // With a second of setup each, the whole test is within the budget.
        assert!(slots as f64 * (f64::from(d) + SETUP_S) <= left);
        // Two rails and a minute: longer directions; never under 1 s.
        assert_eq!(direction_seconds(59.5, 2), 28);
        assert_eq!(direction_seconds(1.5, 2), 1);
        assert_eq!(direction_seconds(f64::NAN, 2), 1);
    }
}
