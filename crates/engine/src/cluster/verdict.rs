//! The verdicts of a cluster run, from its measurements: one per
//! measured direction of a pair, one per round (a slow round is
//! congestion, not many bad links), one per node (a bad node fails most
//! of its pairs; a bad link fails only its own).
//!
//! The rules, and where they come from:
//!
//! - **Absolute** (`--expect-rate` × `--min-efficiency`, `--max-latency`):
//!   what the link validation of a single run judges. With
//!   `--expect-rate auto` a direction's floor is the slower of its two
//!   ports' negotiated rates (each rank reads its own) × the efficiency.
//! - **Relative** (NVIDIA ClusterKit's defaults): bandwidth below 0.93 ×
//!   the cluster's best, latency above 2.1 × its minimum.
//! - **Slow round**: a round of at least [`MIN_PAIRS_FOR_SLOW_ROUND`]
//!   pairs in which more than half the measured directions fail the
//!   relative rule; its relative failures are reported as the round's,
//!   not the links' (absolute failures still count).
//! - **Node**: a rank fails when more than half of the pairs it measured
//!   (at least two) failed; otherwise its failed pairs are link findings,
//!   except those with a failing rank (that rank's finding: a bad node
//!   does not put a link finding on every rank that met it).
//!   A pair whose peer never arrived or died is "peer missing": neither a
//!   pass nor a failure of the rank that was there.
//! - **Port errors**: a rank whose port's error counters rose during the
//!   run (sampled by the rank when it joined and with every round's
//!   report) fails as a node, whatever its figures: the counter-delta
//!   check of a single run, per node.
//! - **Switch** (with a [`LeafLayout`]: [`judge_with_layout`]): a leaf
//!   whose cross-leaf directions mostly failed while its nodes pass
//!   among themselves is named (the rule: [`super::localise`]); its
//!   failed cross-leaf directions are its finding ([`Blame::Switch`]),
//!   left out of the node rule and of the slow rounds, and it fails the
//!   run though its nodes pass. Without a layout nothing changes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::localise::{self, LeafLayout, LeafTally, SwitchFinding};
use super::rails::MAX_RAILS;
use super::schedule::Rank;
use crate::fabric::link::CounterRise;
use crate::results::lat::{LatStats, Percentile};
use crate::results::verdict::EXIT_VERDICT_FAIL;

/// ClusterKit's relative bandwidth threshold: a direction below this
/// fraction of the cluster's best fails.
pub const DEFAULT_RELATIVE_BW: f64 = 0.93;
/// ClusterKit's relative latency threshold: a latency above this multiple
/// of the cluster's minimum fails.
pub const DEFAULT_RELATIVE_LAT: f64 = 2.1;
/// A round with fewer pairs is never called slow: with one or two pairs
/// "most of the round" is one bad link.
pub const MIN_PAIRS_FOR_SLOW_ROUND: usize = 3;
/// Exit code of a cluster run with ranks missing (or no rendezvous).
pub const EXIT_RANKS_MISSING: u8 = 4;

/// What the verdicts judge against.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    /// Absolute bandwidth floor, Gb/s (the expected rate × the minimum
    /// efficiency), if any.
    pub min_bw_gbps: Option<f64>,
    /// `--expect-rate auto`: the minimum efficiency, applied to the slower
    /// of a direction's two ports' negotiated rates ([`NodeFacts`]).
    pub rate_efficiency: Option<f64>,
    /// Absolute latency ceiling, µs (`--max-latency`), if any.
    pub max_lat_us: Option<f64>,
    /// Relative bandwidth threshold: the fraction of the cluster's best.
    pub relative_bw: f64,
    /// Relative latency threshold: the multiple of the cluster's minimum.
    pub relative_lat: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            min_bw_gbps: None,
            rate_efficiency: None,
            max_lat_us: None,
            relative_bw: DEFAULT_RELATIVE_BW,
            relative_lat: DEFAULT_RELATIVE_LAT,
        }
    }
}

/// What happened to one direction of one pair's test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum Outcome {
    /// It ran: its figures.
    Measured {
        /// Bandwidth, Gb/s.
        bw_gbps: f64,
        /// Message rate, millions of messages a second (`write_bw`'s
        /// MsgRate), when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        msg_rate_mpps: Option<f64>,
        /// Latency (the percentile judged), µs, when measured.
        lat_us: Option<f64>,
        /// The latency's percentiles, when measured (`--latency`); boxed,
        /// so a direction without them (most, and all of a bandwidth-only
        /// run's millions) takes 64 bytes rather than 136.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        latency: Option<Box<PairLatency>>,
    },
    /// It failed or timed out: why.
    Error {
        /// The error, as the run reported it.
        error: String,
    },
    /// The peer never arrived or died before it: not this rank's failure.
    PeerMissing,
}

/// A direction's latency figures (`write_lat`'s, from its client), µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairLatency {
    /// Round trips measured.
    pub iterations: u64,
    /// Smallest.
    pub min_us: f64,
    /// Mean.
    pub avg_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p99_9_us: f64,
    /// 99.99th percentile.
    pub p99_99_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl PairLatency {
    /// The figures of a `write_lat` run.
    pub fn of(s: &LatStats) -> Self {
        Self {
            iterations: s.iterations,
            min_us: s.t_min_us,
            avg_us: s.t_avg_us,
            p50_us: s.p50_us,
            p90_us: s.p90_us,
            p99_us: s.p99_us,
            p99_9_us: s.p99_9_us,
            p99_99_us: s.p99_99_us,
            max_us: s.t_max_us,
        }
    }

    /// The figure `p` selects (as [`Percentile::value`] does on the
    /// whole statistics).
    pub fn at(&self, p: Percentile) -> f64 {
        match p {
            Percentile::Median => self.p50_us,
            Percentile::Max => self.max_us,
            Percentile::Avg => self.avg_us,
            Percentile::P(q) => [
                (50.0, self.p50_us),
                (90.0, self.p90_us),
                (99.0, self.p99_us),
                (99.9, self.p99_9_us),
                (99.99, self.p99_99_us),
            ]
            .into_iter()
            .find(|&(r, _)| r >= q)
            .map_or(self.max_us, |(_, v)| v),
        }
    }
}

/// What a rank says about its own port, for the node verdicts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFacts {
    /// Its port's negotiated rate, Gb/s, when it could be read (rail 0's).
    pub rate_gbps: Option<f64>,
    /// Per rail k, its rate, Gb/s (empty: `rate_gbps` is rail 0's, the
    /// others unknown).
    pub rail_rates_gbps: Vec<Option<f64>>,
    /// Its port's error counters that rose during the run.
    pub port_errors: Vec<CounterRise>,
    /// What is wrong with its rails against most ranks'
    /// ([`super::rails::findings`]); any fails it.
    pub rail_findings: Vec<String>,
}

impl NodeFacts {
    /// Its rail's rate, Gb/s, when known.
    pub fn rate_on(&self, rail: u32) -> Option<f64> {
        let listed = self.rail_rates_gbps.get(rail as usize).copied().flatten();
        listed.or(if rail == 0 { self.rate_gbps } else { None })
    }
}

/// One direction of one pair's test: data flowing `from` → `to`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    /// The round it ran in (0-based).
    pub round: u32,
    /// The sending rank.
    pub from: Rank,
    /// The receiving rank.
    pub to: Rank,
    /// The rail it ran on: the sender's rail k met the receiver's rail k
    /// (0 with one rail).
    #[serde(default)]
    pub rail: u32,
    /// What happened.
    pub outcome: Outcome,
}

impl Measurement {
    /// The rail it is judged and drawn on: its rail, at most the last of
    /// [`MAX_RAILS`] (the coordinator keeps only the rails both ranks
    /// have; a larger number from elsewhere cannot make the verdicts loop
    /// or allocate beyond that).
    pub fn judged_rail(&self) -> u32 {
        self.rail.min(MAX_RAILS as u32 - 1)
    }

    /// Its bandwidth, Gb/s, when measured.
    pub fn bw(&self) -> Option<f64> {
        match self.outcome {
            Outcome::Measured { bw_gbps, .. } => Some(bw_gbps),
            _ => None,
        }
    }

    fn lat(&self) -> Option<f64> {
        match self.outcome {
            Outcome::Measured { lat_us, .. } => lat_us,
            _ => None,
        }
    }

    /// The pair as an ordered key (lower rank first).
    fn pair(&self) -> (Rank, Rank) {
        (self.from.min(self.to), self.from.max(self.to))
    }
}

/// Why a direction failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Reason {
    /// The test did not complete.
    Error {
        /// Its error.
        error: String,
    },
    /// Below the absolute floor.
    BelowRate {
        /// Measured, Gb/s.
        measured: f64,
        /// The floor, Gb/s.
        min: f64,
    },
    /// Below the relative threshold of the cluster's best.
    BelowBest {
        /// Measured, Gb/s.
        measured: f64,
        /// The cluster's best, Gb/s.
        best: f64,
        /// The threshold, a fraction of `best`.
        fraction: f64,
    },
    /// Above the absolute latency ceiling.
    AboveLatency {
        /// Measured, µs.
        measured: f64,
        /// The ceiling, µs.
        max: f64,
    },
    /// Above the relative multiple of the cluster's minimum latency.
    AboveMinLatency {
        /// Measured, µs.
        measured: f64,
        /// The cluster's minimum, µs.
        min: f64,
        /// The threshold, a multiple of `min`.
        factor: f64,
    },
    /// Below its own past (`--history`): under `drop` × the median of its
    /// earlier passing runs.
    BelowBaseline {
        /// Measured, Gb/s.
        measured: f64,
        /// Its baseline, Gb/s.
        baseline: f64,
        /// The rule's fraction.
        drop: f64,
        /// How many runs the baseline is the median of.
        runs: usize,
        /// Which baseline: its last runs, or its first (reference).
        against: crate::baseline::Against,
    },
}

/// A direction's baseline, from its past runs (`--history`): the figure
/// below `drop` × `baseline_gbps` fails it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BaselineFloor {
    /// Its baseline, Gb/s.
    pub baseline_gbps: f64,
    /// The rule's fraction.
    pub drop: f64,
    /// How many runs the baseline is the median of.
    pub runs: usize,
    /// Which baseline.
    pub against: crate::baseline::Against,
}

impl Reason {
    /// A rule relative to other figures (the run's best, the direction's
    /// past): excused in a slow round, where the whole round was slow.
    fn relative(&self) -> bool {
        matches!(
            self,
            Self::BelowBest { .. } | Self::AboveMinLatency { .. } | Self::BelowBaseline { .. }
        )
    }

    /// One line for a human, e.g. `12.1 Gb/s < 0.93 × best 20.0 Gb/s`.
    pub fn line(&self) -> String {
        match self {
            Self::Error { error } => format!("error: {error}"),
            Self::BelowRate { measured, min } => {
                format!("{} Gb/s < {} Gb/s expected", gbps(*measured), gbps(*min))
            }
            Self::BelowBest {
                measured,
                best,
                fraction,
            } => format!(
                "{} Gb/s < {fraction} × best {} Gb/s",
                gbps(*measured),
                gbps(*best)
            ),
            Self::AboveLatency { measured, max } => {
                format!("{measured:.2} us > {max:.2} us allowed")
            }
            Self::AboveMinLatency {
                measured,
                min,
                factor,
            } => format!("{measured:.2} us > {factor} × minimum {min:.2} us"),
            Self::BelowBaseline {
                measured,
                baseline,
                drop,
                runs,
                against,
            } => format!(
                "{} Gb/s < {drop} × its baseline {} Gb/s (the median of its {} {runs} passing runs)",
                gbps(*measured),
                gbps(*baseline),
                match against {
                    crate::baseline::Against::Recent => "last",
                    crate::baseline::Against::Reference => "first",
                }
            ),
        }
    }
}

/// A bandwidth for a person, Gb/s: two decimals (`40.00`), or three
/// significant digits below 0.01 (`0.000260`: a soft device's figures
/// under emulation, or a link throttled to almost nothing), never a bare
/// `0.00` for a figure that is not zero.
pub fn gbps(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || v.abs() >= 0.01 {
        return format!("{v:.2}");
    }
    let decimals = (2 - v.abs().log10().floor() as i32).clamp(2, 12) as usize;
    format!("{v:.decimals$}")
}

/// Whose fault a failed direction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Blame {
    /// It passed (or its peer was missing).
    None,
    /// One of its ranks fails as a node (named in [`DirectionVerdict::blamed_ranks`]).
    Node,
    /// Neither rank fails as a node: the link between them.
    Link,
    /// Only relative rules failed, in a slow round: congestion.
    SlowRound,
    /// A cross-leaf direction of a leaf switch named by the verdicts
    /// ([`DirectionVerdict::switch_finding`]): its uplinks, not its nodes.
    Switch,
}

/// The verdict on one [`Measurement`] (same index). 40 bytes: one is
/// kept per direction (a test pins the size).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectionVerdict {
    /// Whether it passed; peer-missing directions are not judged (`true`
    /// is never claimed for them: see `peer_missing`).
    pub pass: bool,
    /// The peer was missing: neither pass nor failure.
    pub peer_missing: bool,
    /// Every rule it failed.
    pub reasons: Reasons,
    /// Whose fault a failure is.
    pub blame: Blame,
    /// With [`Blame::Node`], the failing node(s) among its two ranks
    /// (with [`Blame::Switch`], none: see
    /// [`DirectionVerdict::switch_finding`]).
    pub blamed_ranks: BlamedRanks,
    /// The absolute floor it was judged against, Gb/s (`--expect-rate`
    /// × `--min-efficiency`; with `auto`, of the slower port), if any.
    pub min_bw_gbps: Option<f64>,
}

impl Default for DirectionVerdict {
    /// Not judged yet: a placeholder, replaced by each rail's verdict.
    fn default() -> Self {
        Self {
            pass: false,
            peer_missing: false,
            reasons: Reasons::default(),
            blame: Blame::None,
            blamed_ranks: BlamedRanks::default(),
            min_bw_gbps: None,
        }
    }
}

impl DirectionVerdict {
    /// With [`Blame::Switch`], the finding it is blamed on: an index into
    /// [`ClusterVerdict::switches`].
    pub fn switch_finding(&self) -> Option<usize> {
        (self.blame == Blame::Switch)
            .then(|| self.blamed_ranks.switch_finding())
            .flatten()
            .map(|i| i as usize)
    }
}

/// The rules a direction failed: a slice, kept in one pointer (8 bytes,
/// no allocation when it passed) — a verdict is kept for each of up to
/// 8.4 M directions (1,024 ranks × 8 rails, all pairs), where a `Vec`'s
/// 24 bytes cost 134 MB more (docs/performance.md, "The cluster report
/// at scale").
///
/// The box around the `Vec` is on purpose (clippy's `box_collection`
/// would have the `Vec` alone): a `Box<Vec<_>>` is one thin pointer where
/// a `Vec` is three words and a `Box<[_]>` two, and only a failed
/// direction pays the second allocation.
#[allow(clippy::box_collection)]
#[derive(Clone, Default, PartialEq)]
pub struct Reasons(Option<Box<Vec<Reason>>>);

impl From<Vec<Reason>> for Reasons {
    fn from(v: Vec<Reason>) -> Self {
        Self((!v.is_empty()).then(|| Box::new(v)))
    }
}

impl std::ops::Deref for Reasons {
    type Target = [Reason];
    fn deref(&self) -> &[Reason] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl std::fmt::Debug for Reasons {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Reasons {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<const N: usize> PartialEq<[Reason; N]> for Reasons {
    fn eq(&self, other: &[Reason; N]) -> bool {
        **self == other[..]
    }
}

impl PartialEq<Vec<Reason>> for Reasons {
    fn eq(&self, other: &Vec<Reason>) -> bool {
        **self == other[..]
    }
}

/// The failing node(s) among a direction's two ranks: at most two, kept
/// inline (12 bytes, no allocation; a `Vec` is 24 and a heap block). With
/// [`Blame::Switch`] it holds no rank but the switch finding's index, in
/// the same bytes (the verdict stays 40 bytes).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct BlamedRanks {
    ranks: [Rank; 2],
    len: u8,
    /// `ranks[0]` is a switch finding's index, not a rank.
    switch: bool,
}

impl BlamedRanks {
    /// Those of `ranks` that `blamed` says fail (at most the first two).
    pub fn of(ranks: [Rank; 2], blamed: impl Fn(Rank) -> bool) -> Self {
        let mut out = Self::default();
        for r in ranks {
            if blamed(r) {
                out.ranks[usize::from(out.len)] = r;
                out.len += 1;
            }
        }
        out
    }
}

impl BlamedRanks {
    /// No rank: the switch finding `finding` (an index into
    /// [`ClusterVerdict::switches`]).
    pub fn for_switch(finding: u32) -> Self {
        Self {
            ranks: [finding, 0],
            len: 0,
            switch: true,
        }
    }

    /// The switch finding it holds, if any.
    pub fn switch_finding(&self) -> Option<u32> {
        self.switch.then_some(self.ranks[0])
    }
}

impl std::ops::Deref for BlamedRanks {
    type Target = [Rank];
    fn deref(&self) -> &[Rank] {
        &self.ranks[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for BlamedRanks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for BlamedRanks {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<const N: usize> PartialEq<[Rank; N]> for BlamedRanks {
    fn eq(&self, other: &[Rank; N]) -> bool {
        **self == other[..]
    }
}

/// The verdict on one round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundVerdict {
    /// The round.
    pub round: u32,
    /// The rail it is about (0 with one rail: each rail is judged apart).
    pub rail: u32,
    /// Directions measured in it.
    pub measured: usize,
    /// Of those, how many failed a relative rule.
    pub relative_failures: usize,
    /// Whether it is a slow round (see the module doc).
    pub slow: bool,
}

/// A node's (rank's) state after the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// Every pair it measured passed.
    Pass,
    /// Most of its pairs failed: the node is bad.
    Fail,
    /// Some pairs failed, not most: those links are the findings.
    LinkFailures,
    /// It never arrived or died.
    Missing,
}

impl NodeStatus {
    /// Its word in the report.
    pub fn word(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::LinkFailures => "LINK",
            Self::Missing => "MISSING",
        }
    }
}

/// The verdict on one node (rank).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeVerdict {
    /// The rank.
    pub rank: Rank,
    /// Its state.
    pub status: NodeStatus,
    /// Pairs that ran to a verdict (peer-missing pairs not counted).
    pub pairs: usize,
    /// Of those, how many failed (in either direction, slow rounds aside).
    pub failed: usize,
    /// Of those, how many failed only across a leaf switch named by the
    /// verdicts: that switch's finding, left out of the node rule.
    #[serde(skip_serializing_if = "is_zero")]
    pub switch_failed: usize,
    /// Pairs whose peer was missing.
    pub peer_missing: usize,
    /// Its lowest bandwidth in either direction, Gb/s.
    pub worst_bw_gbps: Option<f64>,
    /// Its port's error counters that rose during the run (any fails it).
    pub port_errors: Vec<CounterRise>,
    /// What is wrong with its rails against most ranks' (any fails it).
    pub rail_findings: Vec<String>,
    /// With more than one rail, its verdict on each (figures only: the
    /// port counters and rail findings are the node's); empty with one.
    pub rails: Vec<RailVerdict>,
}

/// A node's verdict on one of its rails: its pairs on that rail, judged
/// against that rail's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RailVerdict {
    /// The rail.
    pub rail: u32,
    /// Its state on that rail.
    pub status: NodeStatus,
    /// Pairs measured on it.
    pub pairs: usize,
    /// Of those, how many failed.
    pub failed: usize,
    /// Of those, how many failed only across a named leaf switch.
    #[serde(skip_serializing_if = "is_zero")]
    pub switch_failed: usize,
    /// Its lowest bandwidth on it, Gb/s.
    pub worst_bw_gbps: Option<f64>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Everything the verdicts say about a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterVerdict {
    /// One per measurement, in the same order.
    pub directions: Vec<DirectionVerdict>,
    /// One per round that measured anything, in round order.
    pub rounds: Vec<RoundVerdict>,
    /// One per rank, in rank order.
    pub nodes: Vec<NodeVerdict>,
    /// The cluster's best bandwidth, Gb/s (of all rails).
    pub best_bw_gbps: Option<f64>,
    /// The cluster's minimum latency, µs.
    pub min_lat_us: Option<f64>,
    /// Per rail k, its best bandwidth, Gb/s: what rail k's relative rule
    /// judges against.
    pub rail_best_bw_gbps: Vec<Option<f64>>,
    /// The relative rule's fraction (`--relative-bw`): a direction below
    /// it × its rail's best fails. The report's colours are anchored on
    /// it.
    pub relative_bw: f64,
    /// With a [`LeafLayout`], the leaf switches named (findings first,
    /// then notes, rail by rail); empty without one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub switches: Vec<SwitchFinding>,
    /// With a [`LeafLayout`], every leaf's figures on every rail it has a
    /// measured direction on; empty without one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leaves: Vec<LeafTally>,
}

impl ClusterVerdict {
    /// How many rails the run was judged on (1 with one rail).
    pub fn rail_count(&self) -> u32 {
        self.rail_best_bw_gbps.len().max(1) as u32
    }

    /// Whether every node passed, none is missing and no leaf switch was
    /// named (a note names none).
    pub fn pass(&self) -> bool {
        self.nodes.iter().all(|n| n.status == NodeStatus::Pass)
            && !self.switches.iter().any(SwitchFinding::fails)
    }

    /// The run's exit code: 4 with ranks missing, 3 with a failure, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.nodes.iter().any(|n| n.status == NodeStatus::Missing) {
            EXIT_RANKS_MISSING
        } else if self.pass() {
            0
        } else {
            EXIT_VERDICT_FAIL
        }
    }
}

/// Judges a run of `size` ranks: `missing` are the ranks that never
/// arrived or died; `measurements` every direction of every pair,
/// including the quick mode's retests. No rank's facts: see
/// [`judge_with`].
pub fn judge(
    size: u32,
    missing: &[Rank],
    measurements: &[Measurement],
    th: &Thresholds,
) -> ClusterVerdict {
    judge_with(size, missing, measurements, th, &[])
}

/// [`judge`], with what each rank said about its port (indexed by rank;
/// shorter than `size`, or empty, when some are unknown): the rates for
/// `--expect-rate auto`, the error counters that rose.
///
/// With more than one rail each rail is judged on its own, as its own
/// fabric (a rail-optimised fabric's rail k is its own switches): its
/// relative rules against its own best, its slow rounds, its nodes. A
/// node's verdict is its worst rail's, and FAIL with port counters that
/// rose or rail findings, whatever its figures.
pub fn judge_with(
    size: u32,
    missing: &[Rank],
    measurements: &[Measurement],
    th: &Thresholds,
    facts: &[NodeFacts],
) -> ClusterVerdict {
    judge_with_layout(size, missing, measurements, th, facts, None)
}

/// [`judge_with`], with where each rank's rails sit (`layout`): a leaf
/// switch whose cross-leaf directions fail while its nodes pass among
/// themselves is named ([`ClusterVerdict::switches`], the rule in
/// [`super::localise`]) instead of failing its nodes. `None`: exactly
/// [`judge_with`]'s verdicts.
pub fn judge_with_layout(
    size: u32,
    missing: &[Rank],
    measurements: &[Measurement],
    th: &Thresholds,
    facts: &[NodeFacts],
    layout: Option<&LeafLayout>,
) -> ClusterVerdict {
    judge_with_baselines(size, missing, measurements, th, facts, layout, &[])
}

/// [`judge_with_layout`], with each direction's own past (`--history`):
/// `baselines[i]` is measurement `i`'s baseline, if it has one (an empty
/// slice: none), and a figure under it fails the direction
/// ([`Reason::BelowBaseline`], a relative rule: a slow round excuses it).
pub fn judge_with_baselines(
    size: u32,
    missing: &[Rank],
    measurements: &[Measurement],
    th: &Thresholds,
    facts: &[NodeFacts],
    layout: Option<&LeafLayout>,
    baselines: &[Option<BaselineFloor>],
) -> ClusterVerdict {
    let baseline_of = |i: usize| baselines.get(i).copied().flatten();
    let rails = measurements
        .iter()
        .map(Measurement::judged_rail)
        .max()
        .unwrap_or(0)
        + 1;
    if rails == 1 {
        let all: Vec<&Measurement> = measurements.iter().collect();
        let floors: Vec<Option<BaselineFloor>> = (0..measurements.len()).map(baseline_of).collect();
        let ctx = RailContext {
            rail: 0,
            layout,
            baselines: &floors,
        };
        return judge_rail(size, missing, &all, th, facts, ctx);
    }
    // The rails' verdicts are about figures: the node's own facts join
    // when they are combined.
    let figures_only: Vec<NodeFacts> = facts
        .iter()
        .map(|f| NodeFacts {
            port_errors: Vec::new(),
            rail_findings: Vec::new(),
            ..f.clone()
        })
        .collect();
    // Each rail judged on references into `measurements` (no copy of
    // them), its verdicts put in place: at 8.4 M directions a clone of a
    // rail's measurements, or an `Option` per verdict then collected
    // again, cost hundreds of MB (docs/performance.md).
    let mut directions: Vec<DirectionVerdict> = Vec::new();
    directions.resize_with(measurements.len(), DirectionVerdict::default);
    let mut rounds = Vec::new();
    let mut by_rail: Vec<Vec<NodeVerdict>> = Vec::new();
    let mut rail_best = Vec::new();
    let mut min_lat: Option<f64> = None;
    let mut switches: Vec<SwitchFinding> = Vec::new();
    let mut leaves: Vec<LeafTally> = Vec::new();
    for rail in 0..rails {
        let (at, on_rail): (Vec<usize>, Vec<&Measurement>) = measurements
            .iter()
            .enumerate()
            .filter(|(_, m)| m.judged_rail() == rail)
            .unzip();
        let floors: Vec<Option<BaselineFloor>> = if baselines.is_empty() {
            Vec::new()
        } else {
            at.iter().map(|&i| baseline_of(i)).collect()
        };
        let ctx = RailContext {
            rail,
            layout,
            baselines: &floors,
        };
        let v = judge_rail(size, missing, &on_rail, th, &figures_only, ctx);
        drop(on_rail);
        // Each rail's switch findings are indexed from 0: offset into
        // the run's list.
        let offset = switches.len() as u32;
        for (i, mut d) in at.into_iter().zip(v.directions) {
            if let Some(f) = d.blamed_ranks.switch_finding() {
                d.blamed_ranks = BlamedRanks::for_switch(f + offset);
            }
            directions[i] = d;
        }
        switches.extend(v.switches);
        leaves.extend(v.leaves.into_iter().map(|mut l| {
            l.finding = l.finding.map(|f| f + offset);
            l
        }));
        rounds.extend(v.rounds);
        by_rail.push(v.nodes);
        rail_best.push(v.best_bw_gbps);
        min_lat = match (min_lat, v.min_lat_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    rounds.sort_by_key(|r| (r.round, r.rail));
    let nodes: Vec<NodeVerdict> = (0..size)
        .map(|rank| {
            let on = |rail: &Vec<NodeVerdict>| rail[rank as usize].clone();
            let per_rail: Vec<NodeVerdict> = by_rail.iter().map(on).collect();
            let fact = facts.get(rank as usize);
            let port_errors = fact.map(|f| f.port_errors.clone()).unwrap_or_default();
            let rail_findings = fact.map(|f| f.rail_findings.clone()).unwrap_or_default();
            let worst_status = per_rail
                .iter()
                .map(|n| n.status)
                .max_by_key(|s| match s {
                    NodeStatus::Pass => 0,
                    NodeStatus::LinkFailures => 1,
                    NodeStatus::Fail => 2,
                    NodeStatus::Missing => 3,
                })
                .unwrap_or(NodeStatus::Pass);
            let status = if missing.contains(&rank) {
                NodeStatus::Missing
            } else if !port_errors.is_empty() || !rail_findings.is_empty() {
                NodeStatus::Fail
            } else {
                worst_status
            };
            NodeVerdict {
                rank,
                status,
                pairs: per_rail.iter().map(|n| n.pairs).sum(),
                failed: per_rail.iter().map(|n| n.failed).sum(),
                switch_failed: per_rail.iter().map(|n| n.switch_failed).sum(),
                peer_missing: per_rail.iter().map(|n| n.peer_missing).sum(),
                worst_bw_gbps: per_rail
                    .iter()
                    .filter_map(|n| n.worst_bw_gbps)
                    .reduce(f64::min),
                port_errors,
                rail_findings,
                rails: per_rail
                    .iter()
                    .zip(0..)
                    .map(|(n, rail)| RailVerdict {
                        rail,
                        status: n.status,
                        pairs: n.pairs,
                        failed: n.failed,
                        switch_failed: n.switch_failed,
                        worst_bw_gbps: n.worst_bw_gbps,
                    })
                    .collect(),
            }
        })
        .collect();
    ClusterVerdict {
        directions,
        rounds,
        nodes,
        best_bw_gbps: rail_best.iter().flatten().copied().reduce(f64::max),
        min_lat_us: min_lat,
        rail_best_bw_gbps: rail_best,
        relative_bw: th.relative_bw,
        switches,
        leaves,
    }
}

/// What one rail's verdict is judged with beside its figures.
#[derive(Clone, Copy)]
struct RailContext<'a> {
    /// The rail.
    rail: u32,
    /// Where each rank's rails sit, if known.
    layout: Option<&'a LeafLayout>,
    /// Each measurement's baseline (empty: none).
    baselines: &'a [Option<BaselineFloor>],
}

/// One rail's verdict: `measurements` are all on `ctx.rail`.
fn judge_rail(
    size: u32,
    missing: &[Rank],
    measurements: &[&Measurement],
    th: &Thresholds,
    facts: &[NodeFacts],
    ctx: RailContext<'_>,
) -> ClusterVerdict {
    let RailContext {
        rail,
        layout,
        baselines,
    } = ctx;
    let rate = |r: Rank| {
        facts
            .get(r as usize)
            .and_then(|f| f.rate_on(rail))
            .filter(|g| g.is_finite() && *g > 0.0)
    };
    let port_errors = |r: Rank| {
        facts
            .get(r as usize)
            .map_or(&[][..], |f| f.port_errors.as_slice())
    };
    let rail_findings = |r: Rank| {
        facts
            .get(r as usize)
            .map_or(&[][..], |f| f.rail_findings.as_slice())
    };
    let best_bw = measurements
        .iter()
        .filter_map(|m| m.bw())
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let min_lat = measurements
        .iter()
        .filter_map(|m| m.lat())
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))));

    // Each direction's absolute floor (--expect-rate auto: the slower of
    // its two ports), and every rule it fails.
    let floors: Vec<Option<f64>> = measurements
        .iter()
        .map(|m| {
            th.min_bw_gbps.or_else(|| {
                let eff = th.rate_efficiency?;
                Some(rate(m.from)?.min(rate(m.to)?) * eff)
            })
        })
        .collect();
    let reasons: Vec<Vec<Reason>> = measurements
        .iter()
        .zip(&floors)
        .enumerate()
        .map(|(i, (m, &floor))| {
            let mut r = rules_failed(m, th, floor, best_bw, min_lat);
            if let (Some(b), Some(bw)) = (baselines.get(i).copied().flatten(), m.bw())
                && bw < b.drop * b.baseline_gbps
            {
                r.push(Reason::BelowBaseline {
                    measured: bw,
                    baseline: b.baseline_gbps,
                    drop: b.drop,
                    runs: b.runs,
                    against: b.against,
                });
            }
            r
        })
        .collect();

    // A leaf switch named: its failed cross-leaf directions are its
    // finding, out of the slow rounds and the node rule.
    let (located, switches, leaves) =
        match layout.map(|l| localise::localise(l, size, rail, measurements, &reasons)) {
            Some(l) => (Some(l.explained), l.findings, l.leaves),
            None => (None, Vec::new(), Vec::new()),
        };
    let explained = |i: usize| located.as_ref().and_then(|e| e[i]);

    // Rounds: how many directions fail a relative rule.
    #[derive(Default)]
    struct RoundTally {
        measured: usize,
        relative_failures: usize,
        pairs: Vec<(Rank, Rank)>,
    }
    let mut rounds: BTreeMap<u32, RoundTally> = BTreeMap::new();
    for (i, (m, r)) in measurements.iter().zip(&reasons).enumerate() {
        if matches!(m.outcome, Outcome::Measured { .. }) && explained(i).is_none() {
            let e = rounds.entry(m.round).or_default();
            e.measured += 1;
            e.relative_failures += usize::from(r.iter().any(Reason::relative));
            e.pairs.push(m.pair());
        }
    }
    let rounds: Vec<RoundVerdict> = rounds
        .into_iter()
        .map(|(round, mut t)| {
            t.pairs.sort_unstable();
            t.pairs.dedup();
            RoundVerdict {
                round,
                rail,
                measured: t.measured,
                relative_failures: t.relative_failures,
                slow: t.pairs.len() >= MIN_PAIRS_FOR_SLOW_ROUND
                    && t.relative_failures * 2 > t.measured,
            }
        })
        .collect();
    // The slow rounds as a set: asked once per direction (a scan of the
    // rounds for each was 1,023 × 8.4 M steps at 1,024 ranks × 8 rails).
    let slow_rounds: std::collections::BTreeSet<u32> =
        rounds.iter().filter(|r| r.slow).map(|r| r.round).collect();
    let slow = |round: u32| !slow_rounds.is_empty() && slow_rounds.contains(&round);

    // A direction fails on any rule, except relative rules in a slow round.
    let counted: Vec<bool> = measurements
        .iter()
        .zip(&reasons)
        .map(|(m, r)| r.iter().any(|r| !(slow(m.round) && r.relative())))
        .collect();

    // Nodes: pairs measured and failed, per rank; and whether a failure
    // is all a named switch's (each direction failed only across it).
    let mut pair_failed: BTreeMap<(u32, Rank, Rank), (bool, bool)> = BTreeMap::new();
    let mut pair_missing: BTreeMap<(u32, Rank, Rank), ()> = BTreeMap::new();
    let mut worst = vec![None::<f64>; size as usize];
    for (i, (m, &failed)) in measurements.iter().zip(&counted).enumerate() {
        let (a, b) = m.pair();
        if m.outcome == Outcome::PeerMissing {
            pair_missing.insert((m.round, a, b), ());
            continue;
        }
        let e = pair_failed.entry((m.round, a, b)).or_default();
        e.0 |= failed;
        e.1 |= failed && explained(i).is_none();
        if let Some(bw) = m.bw() {
            for r in [a, b] {
                if let Some(w) = worst.get_mut(r as usize) {
                    *w = Some(w.map_or(bw, |w: f64| w.min(bw)));
                }
            }
        }
    }
    // Per rank: pairs measured, the partners of its failed pairs, and
    // how many of those failed only across a named switch.
    let mut tally: Vec<(usize, Vec<Rank>, usize)> = vec![(0, Vec::new(), 0); size as usize];
    for (&(_, a, b), &(failed, not_switch)) in &pair_failed {
        for (r, other) in [(a, b), (b, a)] {
            if let Some(t) = tally.get_mut(r as usize) {
                t.0 += 1;
                if not_switch {
                    t.1.push(other);
                } else if failed {
                    t.2 += 1;
                }
            }
        }
    }
    // A pair failed only across a named switch says nothing of the node:
    // it is out of the node rule (neither measured nor failed for it).
    let bad_node: Vec<bool> = tally
        .iter()
        .enumerate()
        .map(|(r, (pairs, failed, switch))| {
            let pairs = pairs - switch;
            !missing.contains(&(r as Rank))
                && ((pairs >= 2 && failed.len() * 2 > pairs)
                    || !port_errors(r as Rank).is_empty()
                    || !rail_findings(r as Rank).is_empty())
        })
        .collect();
    let nodes: Vec<NodeVerdict> = (0..size)
        .map(|rank| {
            let mine = |&(_, a, b): &(u32, Rank, Rank)| a == rank || b == rank;
            let (pairs, failed_with, switch_failed) = &tally[rank as usize];
            let (pairs, failed, switch_failed) =
                (*pairs, failed_with.len() + switch_failed, *switch_failed);
            let peer_missing = pair_missing.keys().filter(|k| mine(k)).count();
            // A failure with a failing node is that node's finding, not a
            // link finding of every rank that met it.
            let unexplained = failed_with
                .iter()
                .filter(|&&o| !bad_node.get(o as usize).copied().unwrap_or(false))
                .count();
            let status = if missing.contains(&rank) {
                NodeStatus::Missing
            } else if bad_node[rank as usize] {
                NodeStatus::Fail
            } else if unexplained == 0 {
                NodeStatus::Pass
            } else {
                NodeStatus::LinkFailures
            };
            NodeVerdict {
                rank,
                status,
                pairs,
                failed,
                switch_failed,
                peer_missing,
                worst_bw_gbps: worst.get(rank as usize).copied().flatten(),
                port_errors: port_errors(rank).to_vec(),
                rail_findings: rail_findings(rank).to_vec(),
                rails: Vec::new(),
            }
        })
        .collect();

    let failing_node = |r: Rank| {
        nodes
            .get(r as usize)
            .is_some_and(|n| n.status == NodeStatus::Fail)
    };
    let directions = measurements
        .iter()
        .zip(reasons)
        .zip(&counted)
        .zip(floors)
        .enumerate()
        .map(|(i, (((m, reasons), &failed), min_bw_gbps))| {
            let peer_missing = m.outcome == Outcome::PeerMissing;
            let switch = explained(i).filter(|_| failed);
            let blamed_ranks = if let Some(f) = switch {
                BlamedRanks::for_switch(f)
            } else if failed {
                BlamedRanks::of([m.from, m.to], failing_node)
            } else {
                BlamedRanks::default()
            };
            let blame = if switch.is_some() {
                Blame::Switch
            } else if failed && !blamed_ranks.is_empty() {
                Blame::Node
            } else if failed {
                Blame::Link
            } else if !reasons.is_empty() {
                Blame::SlowRound
            } else {
                Blame::None
            };
            DirectionVerdict {
                pass: !failed && !peer_missing,
                peer_missing,
                reasons: reasons.into(),
                blame,
                blamed_ranks,
                min_bw_gbps,
            }
        })
        .collect();

    ClusterVerdict {
        directions,
        rounds,
        nodes,
        best_bw_gbps: best_bw,
        min_lat_us: min_lat,
        rail_best_bw_gbps: vec![best_bw],
        relative_bw: th.relative_bw,
        switches,
        leaves,
    }
}

/// After the quick mode's bisection round: the ranks to retest (both
/// ranks of every failed direction) and the known-good partners for them
/// (ranks present whose every measured direction passed), each in rank
/// order. The retest pairs them ([`super::schedule::retest`]) so the
/// verdict can tell a bad node from a bad link.
pub fn retest_candidates(
    size: u32,
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
) -> (Vec<Rank>, Vec<Rank>) {
    let mut suspect = vec![false; size as usize];
    let mut measured = vec![false; size as usize];
    for (m, d) in measurements.iter().zip(&verdict.directions) {
        if d.peer_missing {
            continue;
        }
        for r in [m.from, m.to] {
            if let Some(x) = measured.get_mut(r as usize) {
                *x = true;
            }
            if !d.pass
                && let Some(x) = suspect.get_mut(r as usize)
            {
                *x = true;
            }
        }
    }
    let suspects = (0..size).filter(|&r| suspect[r as usize]).collect();
    let good = (0..size)
        .filter(|&r| measured[r as usize] && !suspect[r as usize])
        .collect();
    (suspects, good)
}

/// Every rule `m` fails against `th`, its absolute floor `floor` (Gb/s)
/// and the cluster's best and minimum.
fn rules_failed(
    m: &Measurement,
    th: &Thresholds,
    floor: Option<f64>,
    best_bw: Option<f64>,
    min_lat: Option<f64>,
) -> Vec<Reason> {
    let (bw, lat) = match &m.outcome {
        Outcome::Measured {
            bw_gbps, lat_us, ..
        } => (*bw_gbps, *lat_us),
        Outcome::Error { error } => {
            return vec![Reason::Error {
                error: error.clone(),
            }];
        }
        Outcome::PeerMissing => return Vec::new(),
    };
    let mut out = Vec::new();
    if let Some(min) = floor.filter(|&min| bw < min) {
        out.push(Reason::BelowRate { measured: bw, min });
    }
    if let Some(best) = best_bw.filter(|&best| bw < th.relative_bw * best) {
        out.push(Reason::BelowBest {
            measured: bw,
            best,
            fraction: th.relative_bw,
        });
    }
    if let Some(lat) = lat {
        if let Some(max) = th.max_lat_us.filter(|&max| lat > max) {
            out.push(Reason::AboveLatency { measured: lat, max });
        }
        if let Some(min) = min_lat.filter(|&min| lat > th.relative_lat * min) {
            out.push(Reason::AboveMinLatency {
                measured: lat,
                min,
                factor: th.relative_lat,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bw(round: u32, from: Rank, to: Rank, gbps: f64) -> Measurement {
        Measurement {
            round,
            from,
            to,
            rail: 0,
            outcome: Outcome::Measured {
                msg_rate_mpps: None,
                bw_gbps: gbps,
                lat_us: None,
                latency: None,
            },
        }
    }

    /// Both directions of every pair of `rounds` at `gbps`, except where
    /// `slow` says otherwise for a directed pair.
    fn run(
        rounds: &[&[(Rank, Rank)]],
        gbps: f64,
        slow: &[((Rank, Rank), f64)],
    ) -> Vec<Measurement> {
        let mut out = Vec::new();
        for (r, pairs) in rounds.iter().enumerate() {
            for &(a, b) in *pairs {
                for (from, to) in [(a, b), (b, a)] {
                    let v = slow
                        .iter()
                        .find(|(p, _)| *p == (from, to))
                        .map_or(gbps, |(_, v)| *v);
                    out.push(bw(r as u32, from, to, v));
                }
            }
        }
        out
    }

    /// All pairs of 4 ranks by the circle method: rounds of N/2 pairs.
    const FOUR: [&[(Rank, Rank)]; 3] = [&[(0, 3), (1, 2)], &[(1, 3), (0, 2)], &[(2, 3), (0, 1)]];

    fn statuses(v: &ClusterVerdict) -> Vec<NodeStatus> {
        v.nodes.iter().map(|n| n.status).collect()
    }

    /// Four ranks whose every direction ran at 100 Gb/s, judged with the
    /// default thresholds and `facts`.
    fn healthy_four_judged_with(facts: &[NodeFacts]) -> ClusterVerdict {
        judge_with(
            4,
            &[],
            &run(&FOUR, 100.0, &[]),
            &Thresholds::default(),
            facts,
        )
    }

    #[test]
    fn a_clean_run_passes_every_node_and_exits_zero() {
        let v = judge(4, &[], &run(&FOUR, 100.0, &[]), &Thresholds::default());
        assert_eq!(statuses(&v), [NodeStatus::Pass; 4]);
        assert!(
            v.directions
                .iter()
                .all(|d| d.pass && d.blame == Blame::None)
        );
        assert_eq!(v.best_bw_gbps, Some(100.0));
        assert_eq!(v.exit_code(), 0);
    }

    #[test]
    fn a_node_slow_both_ways_fails_as_a_node_and_its_pairs_are_blamed_on_it() {
        // Rank 2 at 50 Gb/s in and out: its 3 pairs fail, the others'
        // one failing pair each is not most of 3, and is rank 2's finding,
        // not theirs: they pass.
        let slow: Vec<_> = [0, 1, 3]
            .into_iter()
            .flat_map(|p| [((2, p), 50.0), ((p, 2), 50.0)])
            .collect();
        let v = judge(4, &[], &run(&FOUR, 100.0, &slow), &Thresholds::default());
        assert_eq!(
            statuses(&v),
            [
                NodeStatus::Pass,
                NodeStatus::Pass,
                NodeStatus::Fail,
                NodeStatus::Pass
            ]
        );
        assert_eq!((v.nodes[2].pairs, v.nodes[2].failed), (3, 3));
        assert_eq!(v.nodes[2].worst_bw_gbps, Some(50.0));
        for (m, d) in run(&FOUR, 100.0, &slow).iter().zip(&v.directions) {
            if m.from == 2 || m.to == 2 {
                assert_eq!(
                    (d.pass, d.blame, &d.blamed_ranks[..]),
                    (false, Blame::Node, &[2][..])
                );
                assert_eq!(
                    d.reasons,
                    [Reason::BelowBest {
                        measured: 50.0,
                        best: 100.0,
                        fraction: 0.93
                    }]
                );
            } else {
                assert!(d.pass);
            }
        }
        assert_eq!(v.exit_code(), 3);
    }

    #[test]
    fn expect_rate_auto_judges_each_direction_against_its_slower_port() {
        // Ranks 0, 1 and 3 negotiated 200 Gb/s, rank 2 only 100 (a
        // down-trained NIC); every direction runs at 95 Gb/s. Against the
        // slower port × 0.9: 180 Gb/s between the 200s (fail), 90 with
        // rank 2 (pass). Rank 2 is not blamed: its own port is slow, and
        // its figures are right for it.
        let facts: Vec<NodeFacts> = [200.0, 200.0, 100.0, 200.0]
            .map(|g| NodeFacts {
                rate_gbps: Some(g),
                ..NodeFacts::default()
            })
            .to_vec();
        let th = Thresholds {
            rate_efficiency: Some(0.9),
            ..Thresholds::default()
        };
        let m = run(&FOUR, 95.0, &[]);
        let v = judge_with(4, &[], &m, &th, &facts);
        for (m, d) in m.iter().zip(&v.directions) {
            if m.from == 2 || m.to == 2 {
                assert!(d.pass, "{m:?}: {d:?}");
                assert_eq!(d.min_bw_gbps, Some(90.0));
            } else {
                assert_eq!(d.min_bw_gbps, Some(180.0));
                assert_eq!(
                    d.reasons,
                    [Reason::BelowRate {
                        measured: 95.0,
                        min: 180.0
                    }],
                    "{m:?}"
                );
            }
        }
        // 0, 1 and 3 fail 2 of their 3 pairs each: bad nodes all.
        assert_eq!(
            statuses(&v),
            [
                NodeStatus::Fail,
                NodeStatus::Fail,
                NodeStatus::Pass,
                NodeStatus::Fail
            ]
        );
        // A rate a rank could not read (or a peer's nonsense) sets no floor.
        let mut unknown = facts.clone();
        unknown[0].rate_gbps = None;
        unknown[1].rate_gbps = Some(f64::NAN);
        let v = judge_with(4, &[], &m, &th, &unknown);
        let pair_01 = m.iter().position(|m| (m.from, m.to) == (0, 1)).unwrap();
        assert!(v.directions[pair_01].pass);
        // A fixed --expect-rate wins over the ports' rates.
        let fixed = Thresholds {
            min_bw_gbps: Some(90.0),
            ..th
        };
        assert!(judge_with(4, &[], &m, &fixed, &facts).pass());
    }

    #[test]
    fn a_port_error_counter_that_rose_fails_its_node_whatever_its_figures() {
        let mut facts = vec![NodeFacts::default(); 4];
        facts[1].port_errors = vec![CounterRise {
            name: "counters/symbol_error".into(),
            before: 10,
            after: 13,
        }];
        let v = healthy_four_judged_with(&facts);
        assert_eq!(
            statuses(&v),
            [
                NodeStatus::Pass,
                NodeStatus::Fail,
                NodeStatus::Pass,
                NodeStatus::Pass
            ]
        );
        assert_eq!(v.nodes[1].port_errors, facts[1].port_errors);
        assert!(v.directions.iter().all(|d| d.pass), "the figures passed");
        assert_eq!(v.exit_code(), 3);
    }

    #[test]
    fn a_node_whose_rails_differ_fails_whatever_its_figures() {
        let mut facts = vec![NodeFacts::default(); 4];
        facts[2].rail_findings = vec!["7 rails, most ranks have 8".into()];
        let v = healthy_four_judged_with(&facts);
        assert_eq!(
            statuses(&v),
            [
                NodeStatus::Pass,
                NodeStatus::Pass,
                NodeStatus::Fail,
                NodeStatus::Pass
            ]
        );
        assert_eq!(v.nodes[2].rail_findings, facts[2].rail_findings);
        assert!(v.nodes[0].rail_findings.is_empty());
        assert_eq!(v.exit_code(), 3);
    }

    /// `rails` copies of [`run`]'s measurements, rail k's at `gbps[k]`,
    /// with `slow` on one rail.
    fn on_rails(gbps: &[f64], slow_rail: u32, slow: &[((Rank, Rank), f64)]) -> Vec<Measurement> {
        (0..gbps.len() as u32)
            .flat_map(|rail| {
                let slow = if rail == slow_rail { slow } else { &[] };
                run(&FOUR, gbps[rail as usize], slow)
                    .into_iter()
                    .map(move |m| Measurement { rail, ..m })
            })
            .collect()
    }

    #[test]
    fn a_node_slow_on_one_rail_fails_naming_that_rail_and_the_other_rail_passes() {
        // Rank 3's rail 1 at 40 % both ways with everyone.
        let slow: Vec<((Rank, Rank), f64)> = (0..3)
            .flat_map(|r| [((3, r), 40.0), ((r, 3), 40.0)])
            .collect();
        let ms = on_rails(&[100.0, 100.0], 1, &slow);
        let v = judge(4, &[], &ms, &Thresholds::default());
        assert_eq!(
            statuses(&v),
            [
                NodeStatus::Pass,
                NodeStatus::Pass,
                NodeStatus::Pass,
                NodeStatus::Fail
            ]
        );
        let rail_status =
            |n: &NodeVerdict| -> Vec<NodeStatus> { n.rails.iter().map(|r| r.status).collect() };
        assert_eq!(
            rail_status(&v.nodes[3]),
            [NodeStatus::Pass, NodeStatus::Fail]
        );
        assert_eq!(
            rail_status(&v.nodes[0]),
            [NodeStatus::Pass, NodeStatus::Pass]
        );
        assert_eq!(
            (v.nodes[3].rails[1].pairs, v.nodes[3].rails[1].failed),
            (3, 3)
        );
        assert_eq!((v.nodes[3].pairs, v.nodes[3].failed), (6, 3));
        for (m, d) in ms.iter().zip(&v.directions) {
            let on_slow_rail_of_3 = m.rail == 1 && (m.from == 3 || m.to == 3);
            assert_eq!(d.pass, !on_slow_rail_of_3, "{m:?}");
            if on_slow_rail_of_3 {
                assert_eq!((d.blame, &d.blamed_ranks[..]), (Blame::Node, &[3][..]));
            }
        }
        assert_eq!(v.rail_best_bw_gbps, [Some(100.0), Some(100.0)]);
        assert!(v.rounds.iter().all(|r| !r.slow) && v.rounds.len() == 6);
    }

    #[test]
    fn each_rail_is_judged_against_its_own_best_and_its_own_ports_rate() {
        // Rail 1 is a 200 Gb/s rail everywhere: not slow against rail 0.
        let ms = on_rails(&[380.0, 190.0], 1, &[]);
        let facts: Vec<NodeFacts> = (0..4)
            .map(|r| NodeFacts {
                rate_gbps: Some(400.0),
                // Rank 2's rail 1 trained down to 100 Gb/s.
                rail_rates_gbps: vec![Some(400.0), Some(if r == 2 { 100.0 } else { 200.0 })],
                ..NodeFacts::default()
            })
            .collect();
        let v = judge_with(4, &[], &ms, &Thresholds::default(), &facts);
        assert!(v.pass(), "{:?}", v.nodes);
        let th = Thresholds {
            rate_efficiency: Some(0.9),
            ..Thresholds::default()
        };
        let v = judge_with(4, &[], &ms, &th, &facts);
        for (m, d) in ms.iter().zip(&v.directions) {
            let floor = match (m.rail, m.from == 2 || m.to == 2) {
                (0, _) => 360.0,
                (_, true) => 90.0,
                (_, false) => 180.0,
            };
            assert_eq!(d.min_bw_gbps, Some(floor), "{m:?}");
            assert!(d.pass, "{m:?}: {:?}", d.reasons);
        }
    }

    #[test]
    fn a_rail_number_beyond_the_cap_is_judged_on_the_last_rail_not_looped_to() {
        let mut ms = on_rails(&[100.0], 0, &[]);
        ms[0].rail = u32::MAX;
        let v = judge(4, &[], &ms, &Thresholds::default());
        assert_eq!(v.directions.len(), ms.len());
        assert_eq!(v.rail_best_bw_gbps.len(), MAX_RAILS);
        assert!(v.pass());
    }

    #[test]
    fn small_figures_keep_three_significant_digits_never_a_bare_zero() {
        assert_eq!(gbps(40.0), "40.00");
        assert_eq!(gbps(0.12), "0.12");
        assert_eq!(gbps(0.00026), "0.000260");
        assert_eq!(gbps(0.001), "0.00100");
        assert_eq!(gbps(0.0), "0.00");
        let r = Reason::BelowRate {
            measured: 0.000256,
            min: 0.001,
        };
        assert_eq!(r.line(), "0.000256 Gb/s < 0.00100 Gb/s expected");
    }

    #[test]
    fn port_errors_fail_a_node_on_many_rails_but_name_no_rail() {
        let ms = on_rails(&[100.0, 100.0], 0, &[]);
        let mut facts = vec![NodeFacts::default(); 4];
        facts[1].port_errors = vec![CounterRise {
            name: "mlx5_1:1 counters/symbol_error".into(),
            before: 0,
            after: 3,
        }];
        let v = judge_with(4, &[], &ms, &Thresholds::default(), &facts);
        assert_eq!(v.nodes[1].status, NodeStatus::Fail);
        assert!(
            v.nodes[1]
                .rails
                .iter()
                .all(|r| r.status == NodeStatus::Pass)
        );
        assert_eq!(v.exit_code(), EXIT_VERDICT_FAIL);
    }

    #[test]
    fn one_bad_link_one_way_fails_only_that_direction_as_a_link() {
        // 1 → 3 at 80 Gb/s (< 93): the reverse direction passes, no node fails.
        let m = run(&FOUR, 100.0, &[((1, 3), 80.0)]);
        let v = judge(4, &[], &m, &Thresholds::default());
        assert_eq!(
            statuses(&v),
            [
                NodeStatus::Pass,
                NodeStatus::LinkFailures,
                NodeStatus::Pass,
                NodeStatus::LinkFailures
            ]
        );
        let failed: Vec<_> = m
            .iter()
            .zip(&v.directions)
            .filter(|(_, d)| !d.pass)
            .map(|(m, d)| (m.from, m.to, d.blame))
            .collect();
        assert_eq!(failed, [(1, 3, Blame::Link)]);
    }

    #[test]
    fn exactly_the_relative_threshold_passes_and_just_below_fails() {
        let v = judge(
            2,
            &[],
            &[bw(0, 0, 1, 93.0), bw(0, 1, 0, 100.0)],
            &Thresholds::default(),
        );
        assert!(v.directions[0].pass);
        let v = judge(
            2,
            &[],
            &[bw(0, 0, 1, 92.99), bw(0, 1, 0, 100.0)],
            &Thresholds::default(),
        );
        assert!(!v.directions[0].pass);
        // Two ranks, one pair: no node can be told from the link.
        assert_eq!(statuses(&v), [NodeStatus::LinkFailures; 2]);
        assert_eq!(v.directions[0].blame, Blame::Link);
    }

    #[test]
    fn the_absolute_floor_fails_a_cluster_that_is_uniformly_slow() {
        let th = Thresholds {
            min_bw_gbps: Some(180.0),
            ..Thresholds::default()
        };
        let v = judge(4, &[], &run(&FOUR, 100.0, &[]), &th);
        assert_eq!(statuses(&v), [NodeStatus::Fail; 4]);
        assert_eq!(
            v.directions[0].reasons,
            [Reason::BelowRate {
                measured: 100.0,
                min: 180.0
            }]
        );
        assert_eq!(
            v.directions[0].reasons[0].line(),
            "100.00 Gb/s < 180.00 Gb/s expected"
        );
    }

    #[test]
    fn a_round_where_most_pairs_are_slow_is_a_slow_round_not_bad_links() {
        // 6 ranks, round 1 congested: all 3 pairs at 60 both ways.
        let rounds: [&[(Rank, Rank)]; 2] = [&[(0, 5), (1, 4), (2, 3)], &[(1, 5), (0, 2), (3, 4)]];
        let slow: Vec<_> = rounds[1]
            .iter()
            .flat_map(|&(a, b)| [((a, b), 60.0), ((b, a), 60.0)])
            .collect();
        let v = judge(6, &[], &run(&rounds, 100.0, &slow), &Thresholds::default());
        assert_eq!(
            v.rounds
                .iter()
                .map(|r| (r.round, r.slow, r.relative_failures))
                .collect::<Vec<_>>(),
            [(0, false, 0), (1, true, 6)]
        );
        assert_eq!(statuses(&v), [NodeStatus::Pass; 6]);
        assert!(
            v.directions[6..]
                .iter()
                .all(|d| d.pass && d.blame == Blame::SlowRound)
        );
        // An absolute floor still fails them.
        let th = Thresholds {
            min_bw_gbps: Some(80.0),
            ..Thresholds::default()
        };
        let v = judge(6, &[], &run(&rounds, 100.0, &slow), &th);
        assert!(v.directions[6..].iter().all(|d| !d.pass));
    }

    #[test]
    fn a_round_of_two_pairs_is_never_slow() {
        let slow = [
            ((0, 3), 50.0),
            ((3, 0), 50.0),
            ((1, 2), 50.0),
            ((2, 1), 50.0),
        ];
        let v = judge(4, &[], &run(&FOUR, 100.0, &slow), &Thresholds::default());
        assert!(v.rounds.iter().all(|r| !r.slow));
        assert_eq!(v.exit_code(), 3);
    }

    #[test]
    fn latency_fails_above_its_ceiling_and_above_twice_the_minimum() {
        let lat = |from, to, us| Measurement {
            round: 0,
            from,
            to,
            rail: 0,
            outcome: Outcome::Measured {
                msg_rate_mpps: None,
                bw_gbps: 100.0,
                lat_us: Some(us),
                latency: None,
            },
        };
        let m = [
            lat(0, 1, 2.0),
            lat(1, 0, 4.3),
            lat(2, 3, 4.2),
            lat(3, 2, 2.5),
        ];
        let th = Thresholds {
            max_lat_us: Some(4.25),
            ..Thresholds::default()
        };
        let v = judge(4, &[], &m, &th);
        assert_eq!(v.min_lat_us, Some(2.0));
        assert!(v.directions[0].pass);
        assert_eq!(
            v.directions[1].reasons,
            [
                Reason::AboveLatency {
                    measured: 4.3,
                    max: 4.25
                },
                Reason::AboveMinLatency {
                    measured: 4.3,
                    min: 2.0,
                    factor: 2.1
                }
            ]
        );
        assert!(
            v.directions[2].pass,
            "4.2 is exactly 2.1 × 2.0 and under 4.25"
        );
        assert_eq!(
            v.directions[1].reasons[1].line(),
            "4.30 us > 2.1 × minimum 2.00 us"
        );
    }

    #[test]
    fn a_missing_rank_is_missing_its_peers_are_not_blamed_and_the_exit_code_is_4() {
        let mut m = run(&FOUR, 100.0, &[]);
        for x in m.iter_mut().filter(|x| x.from == 3 || x.to == 3) {
            x.outcome = Outcome::PeerMissing;
        }
        let v = judge(4, &[3], &m, &Thresholds::default());
        assert_eq!(
            statuses(&v),
            [
                NodeStatus::Pass,
                NodeStatus::Pass,
                NodeStatus::Pass,
                NodeStatus::Missing
            ]
        );
        assert_eq!((v.nodes[0].pairs, v.nodes[0].peer_missing), (2, 1));
        assert!(v.directions.iter().all(|d| d.peer_missing || d.pass));
        assert!(
            v.directions
                .iter()
                .filter(|d| d.peer_missing)
                .all(|d| !d.pass)
        );
        assert_eq!(v.exit_code(), 4);
    }

    #[test]
    fn an_errored_pair_fails_with_its_error() {
        let mut m = run(&FOUR, 100.0, &[]);
        m[0].outcome = Outcome::Error {
            error: "timed out after 10 s".into(),
        };
        let v = judge(4, &[], &m, &Thresholds::default());
        assert_eq!(
            v.directions[0].reasons,
            [Reason::Error {
                error: "timed out after 10 s".into()
            }]
        );
        assert_eq!(v.directions[0].blame, Blame::Link);
        assert_eq!(v.exit_code(), 3);
    }

    #[test]
    fn the_quick_modes_retest_tells_a_bad_node_from_a_bad_link() {
        // Round 0: bisection of 4, pair (0, 2) slow. Round 1: each
        // suspect against a good rank.
        let bisection: &[(Rank, Rank)] = &[(0, 2), (1, 3)];
        let retest: &[(Rank, Rank)] = &[(0, 1), (2, 3)];
        // Node 0 bad: slow again against 1.
        let slow = [
            ((0, 2), 50.0),
            ((2, 0), 50.0),
            ((0, 1), 50.0),
            ((1, 0), 50.0),
        ];
        let v = judge(
            4,
            &[],
            &run(&[bisection, retest], 100.0, &slow),
            &Thresholds::default(),
        );
        assert_eq!(v.nodes[0].status, NodeStatus::Fail);
        // Its slow pair with rank 0 is rank 0's finding.
        assert_eq!(v.nodes[2].status, NodeStatus::Pass);
        assert_eq!(v.nodes[2].failed, 1);
        assert_eq!(v.directions[0].blamed_ranks, [0]);
        // The link bad: both pass against good partners.
        let slow = [((0, 2), 50.0), ((2, 0), 50.0)];
        let v = judge(
            4,
            &[],
            &run(&[bisection, retest], 100.0, &slow),
            &Thresholds::default(),
        );
        assert_eq!(
            statuses(&v),
            [
                NodeStatus::LinkFailures,
                NodeStatus::Pass,
                NodeStatus::LinkFailures,
                NodeStatus::Pass
            ]
        );
        assert_eq!(v.directions[0].blame, Blame::Link);
    }

    #[test]
    fn a_direction_verdict_stays_small_and_serializes_as_lists() {
        // One per direction: 8.4 M at 1,024 ranks × 8 rails.
        assert_eq!(std::mem::size_of::<DirectionVerdict>(), 40);
        let d = DirectionVerdict {
            reasons: vec![Reason::Error { error: "x".into() }].into(),
            blamed_ranks: BlamedRanks::of([3, 4], |r| r == 4),
            ..DirectionVerdict::default()
        };
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["blamed_ranks"], serde_json::json!([4]));
        assert_eq!(json["reasons"][0]["rule"], "error");
        let passed = serde_json::to_value(DirectionVerdict::default()).unwrap();
        assert_eq!(passed["reasons"], serde_json::json!([]));
        assert_eq!(passed["blamed_ranks"], serde_json::json!([]));
    }

    #[test]
    fn reasons_and_statuses_serialize_with_their_rule_names() {
        let r = Reason::BelowBest {
            measured: 50.0,
            best: 100.0,
            fraction: 0.93,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"rule":"below_best","measured":50.0,"best":100.0,"fraction":0.93}"#
        );
        assert_eq!(
            serde_json::to_string(&NodeStatus::LinkFailures).unwrap(),
            r#""link_failures""#
        );
        assert_eq!(NodeStatus::LinkFailures.word(), "LINK");
    }

    #[test]
    fn after_the_bisection_the_failed_pairs_ranks_are_retested_against_good_ones() {
        // Bisection of 6: (0,3) fails one way, (1,4) passes, rank 5's
        // partner 2 never came.
        let m = |from: Rank, to: Rank, outcome: Outcome| Measurement {
            round: 0,
            from,
            to,
            rail: 0,
            outcome,
        };
        let bw = |v: f64| Outcome::Measured {
            msg_rate_mpps: None,
            bw_gbps: v,
            lat_us: None,
            latency: None,
        };
        let all = [
            m(0, 3, bw(50.0)),
            m(3, 0, bw(100.0)),
            m(1, 4, bw(100.0)),
            m(4, 1, bw(100.0)),
            m(2, 5, Outcome::PeerMissing),
            m(5, 2, Outcome::PeerMissing),
        ];
        let v = judge(6, &[2], &all, &Thresholds::default());
        let (suspects, good) = retest_candidates(6, &all, &v);
        assert_eq!(suspects, [0, 3]);
        assert_eq!(good, [1, 4]);
        let rounds = crate::cluster::schedule::retest(6, &suspects, &good, &|a, b| {
            (a.min(b), a.max(b)) == (0, 3)
        });
        assert_eq!(rounds.len(), 1);
        assert!(
            rounds[0]
                .pairs
                .iter()
                .all(|p| good.contains(&p.server) && suspects.contains(&p.client))
        );
    }
}
