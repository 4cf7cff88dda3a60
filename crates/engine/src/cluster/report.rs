//! What rank 0 writes: before the first round the plan ([`plan_line`]);
//! at the end, from the measurements and their verdicts, one line per
//! node and per failed direction for
//! stdout ([`switch_lines`] first, with a topology; [`node_lines`],
//! [`failure_lines`]), the records of
//! `pairs.jsonl` ([`pair_records`], streamed to a writer by
//! [`write_pairs`]) and `summary.json` ([`summary`]), and the Prometheus
//! text of `metrics.prom` ([`metrics`]: bounded, whatever the run's
//! size). No files: the driver opens them (`.partial`, renamed into
//! place; `rdmaperf::cluster::report_files`).

use serde::Serialize;

use super::localise::SwitchFinding;
use super::schedule::{Leaves, Pattern, Rank, Rounds};
use super::verdict::{
    Blame, ClusterVerdict, Measurement, NodeStatus, NodeVerdict, Outcome, RailVerdict, Reason,
    RoundVerdict, gbps,
};
use crate::fabric::link::CounterRise;
use crate::fabric::prom::text::{Exposition, MetricType};
use crate::proto::wire::{MAX_PEER_TEXT, printable};

/// Who ran where: `hosts[r]` is rank r's host name, when it arrived.
#[derive(Debug, Clone, Copy)]
pub struct Roster<'a> {
    /// Per rank, its host as it said (None: never arrived).
    pub hosts: &'a [Option<String>],
    /// Per rank, its device as `DEV:PORT` (None or absent: unknown).
    pub devices: &'a [Option<String>],
    /// Per rank, its rails' devices as `DEV:PORT`, rail 0 first (empty or
    /// absent: rail 0 is `devices`', the others unknown).
    pub rails: &'a [Vec<String>],
}

impl Roster<'_> {
    /// Rank r's host, printable, or `?` when unknown.
    pub fn host(&self, r: Rank) -> String {
        match self.hosts.get(r as usize) {
            Some(Some(h)) => printable(h, MAX_PEER_TEXT),
            _ => "?".into(),
        }
    }

    /// Rank r's device, printable, or `?` when unknown.
    pub fn device(&self, r: Rank) -> String {
        match self.devices.get(r as usize) {
            Some(Some(d)) => printable(d, MAX_PEER_TEXT),
            _ => "?".into(),
        }
    }

    /// Rank r's device on `rail`, printable, or `?` when unknown.
    pub fn rail_device(&self, r: Rank, rail: u32) -> String {
        match self
            .rails
            .get(r as usize)
            .and_then(|d| d.get(rail as usize))
        {
            Some(d) => printable(d, MAX_PEER_TEXT),
            None if rail == 0 => self.device(r),
            None => "?".into(),
        }
    }
}

/// The plan, printed before the first round, e.g. `plan: all-pairs of
/// 1024 ranks: 523776 pairs in 1023 rounds of up to 512 pairs, about
/// 1 h 25 min at 5 s a round`.
/// The leaves schedule's rounds get [`leaves_plan_line`].
pub fn plan_line(pattern: Pattern, size: u32, rounds: &Rounds, per_round_s: f64) -> String {
    if let Rounds::Leaves(leaves) = rounds {
        return leaves_plan_line(leaves, per_round_s);
    }
    format!(
        "plan: {pattern} of {}: {} in {} of up to {}, about {} at {} s a round",
        count(size as usize, "rank"),
        count(rounds.pair_count() as usize, "pair"),
        count(rounds.count() as usize, "round"),
        count(rounds.widest(), "pair"),
        span(f64::from(rounds.count()) * per_round_s),
        per_round_s
    )
}

/// The plan of the leaves schedule, e.g. `plan: leaves of 16384 ranks:
/// 512 groups (32 ranks each), 1 intra-group round + 511 cross-group
/// rounds, 4194304 pairs, about 43 min at 5 s a round` (unequal groups:
/// `(sizes 7–200)`).
pub fn leaves_plan_line(leaves: &Leaves, per_round_s: f64) -> String {
    let (lo, hi) = leaves.group_sizes();
    let sizes = if lo == hi {
        format!("{} each", count(lo as usize, "rank"))
    } else {
        format!("sizes {lo}–{hi}")
    };
    format!(
        "plan: leaves of {}: {} ({sizes}), {} + {}, {}, about {} at {} s a round",
        count(leaves.size() as usize, "rank"),
        count(leaves.groups().len(), "group"),
        count(leaves.intra_rounds() as usize, "intra-group round"),
        count(leaves.cross_rounds() as usize, "cross-group round"),
        count(leaves.pair_count() as usize, "pair"),
        span(f64::from(leaves.count()) * per_round_s),
        per_round_s
    )
}

/// `1 pair`, `2 pairs`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// A span of seconds for a person: `45 s`, `85 min`, `2 h 50 min`,
/// `30.3 days`.
fn span(secs: f64) -> String {
    let secs = secs.max(0.0).round();
    if secs < 120.0 {
        format!("{secs} s")
    } else if secs < 2.0 * 3600.0 {
        format!("{} min", (secs / 60.0).round())
    } else if secs < 2.0 * 86_400.0 {
        let min = (secs / 60.0).round() as u64;
        format!("{} h {} min", min / 60, min % 60)
    } else {
        format!("{:.1} days", secs / 86_400.0)
    }
}

/// The printable names of a run's ranks and their devices on each rail,
/// made once: the writers of `pairs.jsonl`, `pair-sums.jsonl` and
/// `metrics.prom` borrow them for each of up to millions of records
/// instead of making two to four `String`s a direction
/// ([`Roster::host`] allocates each time).
#[derive(Debug, Clone, PartialEq)]
pub struct Names {
    hosts: Vec<String>,
    /// Per rank, its device on each rail, rail 0 first.
    devices: Vec<Vec<String>>,
}

impl Names {
    /// The names of `roster`'s ranks (`size` of them) on `rails` rails.
    pub fn new(roster: Roster<'_>, size: usize, rails: u32) -> Self {
        let ranks = 0..size as Rank;
        Self {
            hosts: ranks.clone().map(|r| roster.host(r)).collect(),
            devices: ranks
                .map(|r| (0..rails).map(|k| roster.rail_device(r, k)).collect())
                .collect(),
        }
    }

    /// Rank r's host, printable, or `?` when unknown.
    pub fn host(&self, r: Rank) -> &str {
        self.hosts.get(r as usize).map_or("?", String::as_str)
    }

    /// Rank r's device on `rail`, printable, or `?` when unknown.
    pub fn rail_device(&self, r: Rank, rail: u32) -> &str {
        self.devices
            .get(r as usize)
            .and_then(|d| d.get(rail as usize))
            .map_or("?", String::as_str)
    }
}

/// One line of `pairs.jsonl`: one direction of one pair.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairRecord<'a> {
    /// The round.
    pub round: u32,
    /// The rail (rail k of the sender met rail k of the receiver).
    pub rail: u32,
    /// The sending rank and its host.
    pub src_rank: Rank,
    /// The sending rank's host.
    pub src_host: &'a str,
    /// The receiving rank.
    pub dst_rank: Rank,
    /// The receiving rank's host.
    pub dst_host: &'a str,
    /// The sending rank's device on that rail, `DEV:PORT`.
    pub src_device: &'a str,
    /// The receiving rank's device.
    pub dst_device: &'a str,
    /// What happened (figures, error, or peer missing).
    pub outcome: &'a Outcome,
    /// The absolute floor it was judged against, Gb/s, if any.
    pub min_bw_gbps: Option<f64>,
    /// Whether it passed (false when the peer was missing: see
    /// `peer_missing`).
    pub pass: bool,
    /// The peer was missing: not judged.
    pub peer_missing: bool,
    /// The rules it failed.
    pub reasons: &'a [Reason],
    /// Whose fault a failure is.
    pub blame: Blame,
    /// With [`Blame::Switch`], the leaf switch named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch: Option<&'a str>,
    /// With [`Blame::Switch`] on the uplinks between two leaves, the
    /// other.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch_peer: Option<&'a str>,
}

/// The records of `pairs.jsonl`, in the measurements' order, one at a
/// time (nothing is collected: 8.4 M of them at 1,024 ranks × 8 rails).
pub fn pair_records<'a>(
    measurements: &'a [Measurement],
    verdict: &'a ClusterVerdict,
    names: &'a Names,
) -> impl Iterator<Item = PairRecord<'a>> + 'a {
    measurements
        .iter()
        .zip(&verdict.directions)
        .map(move |(m, d)| {
            let switch = d.switch_finding().and_then(|i| verdict.switches.get(i));
            PairRecord {
                round: m.round,
                rail: m.rail,
                src_rank: m.from,
                src_host: names.host(m.from),
                dst_rank: m.to,
                dst_host: names.host(m.to),
                src_device: names.rail_device(m.from, m.judged_rail()),
                dst_device: names.rail_device(m.to, m.judged_rail()),
                outcome: &m.outcome,
                min_bw_gbps: d.min_bw_gbps,
                pass: d.pass,
                peer_missing: d.peer_missing,
                reasons: &d.reasons,
                blame: d.blame,
                switch: switch.map(|f| f.name.as_str()),
                switch_peer: switch.and_then(|f| f.peer_name.as_deref()),
            }
        })
}

/// Writes `pairs.jsonl` to `out`, one compact JSON object a line, as a
/// stream; returns how many lines.
///
/// # Errors
/// `out`'s.
pub fn write_pairs(
    out: &mut (impl std::io::Write + ?Sized),
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    names: &Names,
) -> std::io::Result<u64> {
    let mut lines = 0;
    for record in pair_records(measurements, verdict, names) {
        serde_json::to_writer(&mut *out, &record)?;
        out.write_all(b"\n")?;
        lines += 1;
    }
    Ok(lines)
}

/// One direction of one node pair, its rails' bandwidths added up — what
/// the two nodes move between them at once (a line of `pair-sums.jsonl`
/// with more than one rail, with the hosts: [`write_pair_sums`]). No
/// text: one is kept per node pair direction (1 M at 1,024 ranks).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairSum {
    /// The round.
    pub round: u32,
    /// The sending rank.
    pub src_rank: Rank,
    /// The receiving rank.
    pub dst_rank: Rank,
    /// Rails it ran on.
    pub rails: usize,
    /// Of those, how many measured a figure.
    pub rails_measured: usize,
    /// The measured rails' bandwidths added up, Gb/s.
    pub bw_gbps_sum: f64,
    /// The slowest measured rail, Gb/s.
    pub worst_rail_gbps: Option<f64>,
    /// Whether every rail's direction passed.
    pub pass: bool,
}

/// A line of `pair-sums.jsonl`: a [`PairSum`] with its hosts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairSumRecord<'a> {
    /// The round.
    pub round: u32,
    /// The sending rank.
    pub src_rank: Rank,
    /// Its host.
    pub src_host: &'a str,
    /// The receiving rank.
    pub dst_rank: Rank,
    /// Its host.
    pub dst_host: &'a str,
    /// Rails it ran on.
    pub rails: usize,
    /// Of those, how many measured a figure.
    pub rails_measured: usize,
    /// The measured rails' bandwidths added up, Gb/s.
    pub bw_gbps_sum: f64,
    /// The slowest measured rail, Gb/s.
    pub worst_rail_gbps: Option<f64>,
    /// Whether every rail's direction passed.
    pub pass: bool,
}

/// Writes `pair-sums.jsonl` to `out`, one compact line per sum; returns
/// how many lines.
///
/// # Errors
/// `out`'s.
pub fn write_pair_sums(
    out: &mut (impl std::io::Write + ?Sized),
    sums: &[PairSum],
    names: &Names,
) -> std::io::Result<u64> {
    for s in sums {
        let record = PairSumRecord {
            round: s.round,
            src_rank: s.src_rank,
            src_host: names.host(s.src_rank),
            dst_rank: s.dst_rank,
            dst_host: names.host(s.dst_rank),
            rails: s.rails,
            rails_measured: s.rails_measured,
            bw_gbps_sum: s.bw_gbps_sum,
            worst_rail_gbps: s.worst_rail_gbps,
            pass: s.pass,
        };
        serde_json::to_writer(&mut *out, &record)?;
        out.write_all(b"\n")?;
    }
    Ok(sums.len() as u64)
}

/// The sums of `pair-sums.jsonl`: per direction of each node pair in
/// each round, its rails added up, in the order they were first measured.
pub fn pair_sums(
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    _roster: Roster<'_>,
) -> Vec<PairSum> {
    let mut at: std::collections::HashMap<(u32, Rank, Rank), usize> =
        std::collections::HashMap::new();
    let mut out: Vec<PairSum> = Vec::new();
    for (m, d) in measurements.iter().zip(&verdict.directions) {
        let i = *at.entry((m.round, m.from, m.to)).or_insert_with(|| {
            out.push(PairSum {
                round: m.round,
                src_rank: m.from,
                dst_rank: m.to,
                rails: 0,
                rails_measured: 0,
                bw_gbps_sum: 0.0,
                worst_rail_gbps: None,
                pass: true,
            });
            out.len() - 1
        });
        let s = &mut out[i];
        s.rails += 1;
        s.pass &= d.pass;
        if let Some(bw) = m.bw() {
            s.rails_measured += 1;
            s.bw_gbps_sum += bw;
            s.worst_rail_gbps = Some(s.worst_rail_gbps.map_or(bw, |w| w.min(bw)));
        }
    }
    out
}

/// A node in `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRecord<'a> {
    /// Its rank.
    pub rank: Rank,
    /// Its host (`?` when it never arrived).
    pub host: String,
    /// PASS, FAIL, LINK or MISSING.
    pub verdict: &'static str,
    /// Pairs it measured.
    pub pairs: usize,
    /// Of those, how many failed.
    pub failed: usize,
    /// Of those, how many failed only across a named leaf switch (that
    /// switch's finding); absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub switch_failed: usize,
    /// Pairs whose peer was missing.
    pub peer_missing: usize,
    /// Its lowest bandwidth, Gb/s.
    pub worst_bw_gbps: Option<f64>,
    /// Its port's error counters that rose during the run.
    pub port_errors: &'a [CounterRise],
    /// What is wrong with its rails against most ranks'.
    pub rail_findings: &'a [String],
    /// With more than one rail, its verdict on each.
    pub rails: &'a [RailVerdict],
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `summary.json`: the run's verdict as a whole.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary<'a> {
    /// Ranks in the job.
    pub ranks: usize,
    /// The run's exit code (0 pass, 3 fail, 4 ranks missing).
    pub exit_code: u8,
    /// Whether every node passed.
    pub pass: bool,
    /// Per node.
    pub nodes: Vec<NodeRecord<'a>>,
    /// The ranks that never arrived or died.
    pub missing_ranks: Vec<Rank>,
    /// With a topology, the leaf switches named (findings, then notes):
    /// absent without one.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub switches: &'a [SwitchFinding],
    /// The rounds judged slow (congestion).
    pub slow_rounds: Vec<&'a RoundVerdict>,
    /// The cluster's best bandwidth, Gb/s.
    pub best_bw_gbps: Option<f64>,
    /// Per rail, its best bandwidth, Gb/s.
    pub rail_best_bw_gbps: &'a [Option<f64>],
    /// The cluster's minimum latency, µs.
    pub min_lat_us: Option<f64>,
    /// The run's wall time, seconds.
    pub duration_s: f64,
}

/// The run's summary.
pub fn summary<'a>(
    verdict: &'a ClusterVerdict,
    roster: Roster<'_>,
    duration_s: f64,
) -> Summary<'a> {
    Summary {
        ranks: verdict.nodes.len(),
        exit_code: verdict.exit_code(),
        pass: verdict.pass(),
        nodes: verdict
            .nodes
            .iter()
            .map(|n| NodeRecord {
                rank: n.rank,
                host: roster.host(n.rank),
                verdict: n.status.word(),
                pairs: n.pairs,
                failed: n.failed,
                switch_failed: n.switch_failed,
                peer_missing: n.peer_missing,
                worst_bw_gbps: n.worst_bw_gbps,
                port_errors: &n.port_errors,
                rail_findings: &n.rail_findings,
                rails: &n.rails,
            })
            .collect(),
        missing_ranks: verdict
            .nodes
            .iter()
            .filter(|n| n.status == NodeStatus::Missing)
            .map(|n| n.rank)
            .collect(),
        switches: &verdict.switches,
        slow_rounds: verdict.rounds.iter().filter(|r| r.slow).collect(),
        best_bw_gbps: verdict.best_bw_gbps,
        rail_best_bw_gbps: &verdict.rail_best_bw_gbps,
        min_lat_us: verdict.min_lat_us,
        duration_s,
    }
}

/// One line per leaf switch named, for stdout before the nodes', e.g.
/// `SWITCH leaf leaf3, rail 0: 64 of 64 cross-leaf directions failed,
/// ...: suspect its uplinks` (findings first, then notes: `NOTE leaf
/// ...: its uplinks cannot be told from its nodes`). None without a
/// topology.
pub fn switch_lines(verdict: &ClusterVerdict) -> Vec<String> {
    let mut found: Vec<&SwitchFinding> = verdict.switches.iter().collect();
    found.sort_by_key(|f| !f.fails());
    found
        .into_iter()
        .map(|f| format!("{} {}", f.word(), f.message))
        .collect()
}

/// One line per node for stdout, e.g. `rank 2 node-c: FAIL 3 of 3 pairs
/// failed, worst 50.00 Gb/s`.
pub fn node_lines(verdict: &ClusterVerdict, roster: Roster<'_>) -> Vec<String> {
    verdict
        .nodes
        .iter()
        .map(|n| {
            let mut line = format!(
                "rank {} {}: {}",
                n.rank,
                roster.host(n.rank),
                n.status.word()
            );
            if n.status != NodeStatus::Missing {
                line.push_str(&format!(" {} of {} pairs failed", n.failed, n.pairs));
                if n.status == NodeStatus::Pass && n.failed > 0 {
                    // Each with a failing node or across a named switch:
                    // that node's or that switch's finding.
                    line.push_str(match (n.switch_failed, n.failed) {
                        (0, _) => " (with a failing node)",
                        (s, f) if s == f => " (across a failing switch)",
                        _ => " (with a failing node or across a failing switch)",
                    });
                } else if n.switch_failed > 0 {
                    line.push_str(&format!(" ({} across a failing switch)", n.switch_failed));
                }
                if let Some(w) = n.worst_bw_gbps {
                    line.push_str(&format!(", worst {} Gb/s", gbps(w)));
                }
                if n.peer_missing > 0 {
                    line.push_str(&format!(", {} with a peer missing", n.peer_missing));
                }
                if !n.port_errors.is_empty() {
                    let rose: Vec<String> = n
                        .port_errors
                        .iter()
                        .map(|c| format!("{} {} -> {}", c.name, c.before, c.after))
                        .collect();
                    line.push_str(&printable(
                        &format!("; port error counters rose: {}", rose.join(", ")),
                        MAX_PEER_TEXT,
                    ));
                }
                if !n.rail_findings.is_empty() {
                    line.push_str(&printable(
                        &format!("; rails: {}", n.rail_findings.join("; ")),
                        MAX_PEER_TEXT,
                    ));
                }
                for r in failed_rails(n, roster) {
                    line.push_str("; ");
                    line.push_str(&r);
                }
            }
            line
        })
        .collect()
}

/// The rails of `n` that did not pass, by name: `rail 1 mlx5_1:1: FAIL
/// 3 of 3 pairs failed, worst 0.00 Gb/s`.
pub fn failed_rails(n: &NodeVerdict, roster: Roster<'_>) -> Vec<String> {
    n.rails
        .iter()
        .filter(|r| r.status != NodeStatus::Pass)
        .map(|r| {
            let mut t = format!(
                "rail {} {}: {} {} of {} pairs failed",
                r.rail,
                roster.rail_device(n.rank, r.rail),
                r.status.word(),
                r.failed,
                r.pairs
            );
            if let Some(w) = r.worst_bw_gbps {
                t.push_str(&format!(", worst {} Gb/s", gbps(w)));
            }
            t
        })
        .collect()
}

/// One line per failed direction for stdout, e.g. `round 4: rank 1
/// node-b -> rank 0 node-a: LINK: 50.00 Gb/s < 0.93 × best 100.00 Gb/s`.
pub fn failure_lines(
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
) -> Vec<String> {
    let several_rails = verdict.rail_count() > 1;
    measurements
        .iter()
        .zip(&verdict.directions)
        .filter(|(_, d)| !d.pass && !d.peer_missing)
        .map(|(m, d)| {
            let whose = match d.blame {
                Blame::Node => format!(
                    "NODE {}",
                    d.blamed_ranks
                        .iter()
                        .map(|r| format!("rank {r}"))
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
                Blame::Switch => match d.switch_finding().and_then(|i| verdict.switches.get(i)) {
                    Some(f) => format!("SWITCH {}", f.what()),
                    None => "SWITCH".into(),
                },
                _ => "LINK".into(),
            };
            let why: Vec<String> = d
                .reasons
                .iter()
                .map(|r| printable(&r.line(), MAX_PEER_TEXT))
                .collect();
            let rail = if several_rails {
                format!(
                    ", rail {} ({} -> {})",
                    m.rail,
                    roster.rail_device(m.from, m.rail),
                    roster.rail_device(m.to, m.rail)
                )
            } else {
                String::new()
            };
            format!(
                "round {}{rail}: rank {} {} -> rank {} {}: {whose}: {}",
                m.round,
                m.from,
                roster.host(m.from),
                m.to,
                roster.host(m.to),
                why.join("; ")
            )
        })
        .collect()
}

/// At most this many leaf switches (leaf and rail) have series in
/// `metrics.prom`, findings first: at 16,384 nodes under 512 leaves on 8
/// rails, 4,096 would be a tenth of the per-node series; the cap keeps a
/// topology of thousands of one-node leaves from doubling the file.
pub const PROM_MAX_SWITCHES: usize = 1_024;

/// How many of the worst directions `metrics.prom` carries by default
/// (`--prom-worst`): as many as the Grafana panel's `bottomk(10, ...)`
/// shows.
pub const DEFAULT_PROM_WORST: usize = 10;

/// The indices of the `k` worst judged directions, worst first: those
/// that ran to an error, then the lowest bandwidths (peer-missing
/// directions are not judged and not listed). A heap of `k`: nothing
/// the size of the run is allocated.
pub fn worst_directions(measurements: &[Measurement], k: usize) -> Vec<usize> {
    use std::cmp::Ordering;
    use std::collections::BinaryHeap;
    /// A direction's badness key: lower is worse (an error is -inf).
    #[derive(PartialEq)]
    struct Key(f64, usize);
    impl Eq for Key {}
    impl PartialOrd for Key {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Key {
        fn cmp(&self, other: &Self) -> Ordering {
            self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
        }
    }
    if k == 0 {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Key> = BinaryHeap::with_capacity(k.min(measurements.len()) + 1);
    for (i, m) in measurements.iter().enumerate() {
        let key = match m.outcome {
            Outcome::Measured { bw_gbps, .. } => bw_gbps,
            Outcome::Error { .. } => f64::NEG_INFINITY,
            Outcome::PeerMissing => continue,
        };
        // The heap keeps the k smallest keys, its top the largest of them.
        if heap.len() < k {
            heap.push(Key(key, i));
        } else if heap.peek().is_some_and(|top| Key(key, i) < *top) {
            heap.pop();
            heap.push(Key(key, i));
        }
    }
    heap.into_sorted_vec()
        .into_iter()
        .map(|Key(_, i)| i)
        .collect()
}

/// One node's figures on one rail, from the directions it sent or
/// received there.
#[derive(Debug, Clone, Default, PartialEq)]
struct RailFigures {
    /// Their bandwidths (f32: a median and a minimum to two decimals).
    bws: Vec<f32>,
    /// Judged directions (not peer-missing).
    directions: usize,
    /// Of those, failed.
    failed: usize,
}

/// Each rank's [`RailFigures`] on `rail`.
fn rail_figures(
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    rail: u32,
    size: usize,
) -> Vec<RailFigures> {
    let mut out = vec![RailFigures::default(); size];
    let on_rail = measurements
        .iter()
        .zip(&verdict.directions)
        .filter(|(m, d)| m.judged_rail() == rail && !d.peer_missing);
    for (m, d) in on_rail {
        for r in [m.from, m.to] {
            if let Some(f) = out.get_mut(r as usize) {
                f.directions += 1;
                f.failed += usize::from(!d.pass);
                if let Some(bw) = m.bw() {
                    f.bws.push(bw as f32);
                }
            }
        }
    }
    out
}

/// The median of `v` (sorted here), or None when empty.
fn median(v: &mut [f32]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(f32::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        f64::from(v[mid])
    } else {
        (f64::from(v[mid - 1]) + f64::from(v[mid])) / 2.0
    })
}

/// `metrics.prom`, its cardinality bounded whatever the run's size (the
/// textfile collector of one node; Prometheus' own advice: "do not use
/// labels to store dimensions with high cardinality", prometheus.io/docs
/// /practices/naming): per node its verdict; per node and rail its
/// verdict, worst and median bandwidth and failed directions; the run's
/// summary; and only the `worst` worst directions (with their hosts),
/// never one series per direction — `pairs.jsonl` has every one. At
/// 1,024 ranks × 8 rails: about 40,000 series, not 25 M.
pub fn metrics(
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    names: &Names,
    duration_s: f64,
    worst: usize,
) -> Exposition {
    let mut e = Exposition::new();
    for i in worst_directions(measurements, worst) {
        let (m, d) = (&measurements[i], &verdict.directions[i]);
        let (src, dst, round) = (m.from.to_string(), m.to.to_string(), m.round.to_string());
        let rail = m.rail.to_string();
        let labels = [
            ("src_rank", src.as_str()),
            ("src_host", names.host(m.from)),
            ("dst_rank", dst.as_str()),
            ("dst_host", names.host(m.to)),
            ("round", round.as_str()),
            ("rail", rail.as_str()),
        ];
        if let Outcome::Measured {
            bw_gbps, lat_us, ..
        } = m.outcome
        {
            e.sample(
                "rdmaperf_cluster_pair_bandwidth_gbps",
                "Bandwidth of one direction of one pair, Gb/s: only the --prom-worst slowest directions (pairs.jsonl has every one).",
                MetricType::Gauge,
                &labels,
                bw_gbps,
            );
            if let Some(lat) = lat_us {
                e.sample(
                    "rdmaperf_cluster_pair_latency_seconds",
                    "Latency of one of the --prom-worst slowest directions (the percentile judged), seconds.",
                    MetricType::Gauge,
                    &labels,
                    lat / 1e6,
                );
            }
        }
        e.sample(
            "rdmaperf_cluster_pair_pass",
            "1 when one of the --prom-worst slowest directions passed its verdicts, 0 when it failed.",
            MetricType::Gauge,
            &labels,
            f64::from(u8::from(d.pass)),
        );
    }
    for n in &verdict.nodes {
        let rank = n.rank.to_string();
        e.sample(
            "rdmaperf_cluster_node_pass",
            "1 when a node passed (every pair it measured passed), else 0; its verdict word in `verdict`.",
            MetricType::Gauge,
            &[("rank", &rank), ("host", names.host(n.rank)), ("verdict", n.status.word())],
            f64::from(u8::from(n.status == NodeStatus::Pass)),
        );
    }
    let size = verdict.nodes.len();
    for rail in 0..verdict.rail_count() {
        let rail_text = rail.to_string();
        let mut figures = rail_figures(measurements, verdict, rail, size);
        for (n, f) in verdict.nodes.iter().zip(&mut figures) {
            let status = n
                .rails
                .iter()
                .find(|r| r.rail == rail)
                .map_or(n.status, |r| r.status);
            let rank = n.rank.to_string();
            let labels = [
                ("rank", rank.as_str()),
                ("host", names.host(n.rank)),
                ("rail", rail_text.as_str()),
                ("device", names.rail_device(n.rank, rail)),
            ];
            let with_verdict = [
                labels[0],
                labels[1],
                labels[2],
                labels[3],
                ("verdict", status.word()),
            ];
            e.sample(
                "rdmaperf_cluster_node_rail_pass",
                "1 when a node passed on a rail, else 0; its rail's verdict word in `verdict`.",
                MetricType::Gauge,
                &with_verdict,
                f64::from(u8::from(status == NodeStatus::Pass)),
            );
            e.sample(
                "rdmaperf_cluster_node_rail_directions",
                "Directions a node sent or received on a rail and that were judged (not peer-missing).",
                MetricType::Gauge,
                &labels,
                f.directions as f64,
            );
            e.sample(
                "rdmaperf_cluster_node_rail_failed_directions",
                "Of those, how many failed.",
                MetricType::Gauge,
                &labels,
                f.failed as f64,
            );
            if let Some(w) = f.bws.iter().copied().reduce(f32::min) {
                e.sample(
                    "rdmaperf_cluster_node_rail_worst_bandwidth_gbps",
                    "The lowest bandwidth of a direction a node sent or received on a rail, Gb/s.",
                    MetricType::Gauge,
                    &labels,
                    f64::from(w),
                );
            }
            if let Some(mid) = median(&mut f.bws) {
                e.sample(
                    "rdmaperf_cluster_node_rail_median_bandwidth_gbps",
                    "The median bandwidth of the directions a node sent or received on a rail, Gb/s.",
                    MetricType::Gauge,
                    &labels,
                    mid,
                );
            }
            f.bws = Vec::new();
        }
        if let Some(best) = verdict
            .rail_best_bw_gbps
            .get(rail as usize)
            .copied()
            .flatten()
        {
            e.sample(
                "rdmaperf_cluster_rail_best_bandwidth_gbps",
                "A rail's best bandwidth, Gb/s: what its relative rule judges against.",
                MetricType::Gauge,
                &[("rail", rail_text.as_str())],
                best,
            );
        }
    }
    switch_metrics(&mut e, verdict);
    let missing = verdict
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Missing)
        .count();
    let judged = verdict.directions.iter().filter(|d| !d.peer_missing);
    let (directions, failed) = judged.fold((0usize, 0usize), |(n, f), d| {
        (n + 1, f + usize::from(!d.pass))
    });
    let gauges = [
        (
            "rdmaperf_cluster_pass",
            "1 when the run passed (every node PASS, none missing), else 0.",
            f64::from(u8::from(verdict.pass())),
        ),
        (
            "rdmaperf_cluster_ranks",
            "Ranks in the job.",
            verdict.nodes.len() as f64,
        ),
        (
            "rdmaperf_cluster_ranks_missing",
            "Ranks that never arrived or died.",
            missing as f64,
        ),
        (
            "rdmaperf_cluster_directions",
            "Directions judged (every direction of every pair on every rail, not peer-missing).",
            directions as f64,
        ),
        (
            "rdmaperf_cluster_directions_failed",
            "Of those, how many failed.",
            failed as f64,
        ),
        (
            "rdmaperf_cluster_slow_rounds",
            "Rounds judged slow (most of their pairs below the relative threshold).",
            verdict.rounds.iter().filter(|r| r.slow).count() as f64,
        ),
        (
            "rdmaperf_cluster_run_duration_seconds",
            "The run's wall time, seconds.",
            duration_s,
        ),
    ];
    for (name, help, value) in gauges {
        e.sample(name, help, MetricType::Gauge, &[], value);
    }
    e
}

/// `metrics.prom`'s per-switch series, with a topology (none without):
/// every leaf judged on each rail (up to [`PROM_MAX_SWITCHES`], those
/// named first), its verdict, its cross- and intra-leaf directions and
/// failures, its slowest cross-leaf direction; and how many leaves were
/// named and judged.
fn switch_metrics(e: &mut Exposition, verdict: &ClusterVerdict) {
    if verdict.leaves.is_empty() {
        return;
    }
    let finding = |i: Option<u32>| i.and_then(|i| verdict.switches.get(i as usize));
    let mut leaves: Vec<_> = verdict.leaves.iter().collect();
    leaves.sort_by_key(|l| {
        (
            !finding(l.finding).is_some_and(SwitchFinding::fails),
            l.rail,
        )
    });
    for l in leaves.into_iter().take(PROM_MAX_SWITCHES) {
        let rail = l.rail.to_string();
        let labels = [("switch", l.name.as_str()), ("rail", rail.as_str())];
        let f = finding(l.finding);
        let word = f.map_or("PASS", SwitchFinding::word);
        e.sample(
            "rdmaperf_cluster_switch_pass",
            "1 when a leaf switch was not named on a rail (its cross-leaf directions passed, or its nodes are to blame), 0 when its uplinks are suspect; the verdict word (PASS, SWITCH, NOTE) in `verdict`.",
            MetricType::Gauge,
            &[labels[0], labels[1], ("verdict", word)],
            f64::from(u8::from(!f.is_some_and(SwitchFinding::fails))),
        );
        let counts = [
            (
                "rdmaperf_cluster_switch_nodes",
                "Ranks whose port on a rail sits under a leaf switch.",
                l.nodes,
            ),
            (
                "rdmaperf_cluster_switch_cross_directions",
                "Directions judged between a leaf switch's nodes and other leaves' on a rail.",
                l.cross_measured,
            ),
            (
                "rdmaperf_cluster_switch_cross_failed_directions",
                "Of a leaf switch's cross-leaf directions, how many failed.",
                l.cross_failed,
            ),
            (
                "rdmaperf_cluster_switch_intra_directions",
                "Directions judged between two nodes under the same leaf switch on a rail.",
                l.intra_measured,
            ),
            (
                "rdmaperf_cluster_switch_intra_failed_directions",
                "Of a leaf switch's intra-leaf directions, how many failed.",
                l.intra_failed,
            ),
        ];
        for (name, help, value) in counts {
            e.sample(name, help, MetricType::Gauge, &labels, value as f64);
        }
        if let Some(w) = l.worst_cross_bw_gbps {
            e.sample(
                "rdmaperf_cluster_switch_worst_cross_bandwidth_gbps",
                "The lowest bandwidth of a leaf switch's cross-leaf directions on a rail, Gb/s.",
                MetricType::Gauge,
                &labels,
                w,
            );
        }
    }
    e.sample(
        "rdmaperf_cluster_switches_named",
        "Leaf switches (leaf and rail) whose uplinks the verdicts name; each fails the run.",
        MetricType::Gauge,
        &[],
        verdict.switches.iter().filter(|f| f.fails()).count() as f64,
    );
    e.sample(
        "rdmaperf_cluster_switches_judged",
        "Leaf switches (leaf and rail) with a judged direction (per-switch series: at most 1024, those named first).",
        MetricType::Gauge,
        &[],
        verdict.leaves.len() as f64,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::verdict::{Thresholds, judge};

    /// Four ranks, all pairs; rank 2 slow both ways; rank 3 never came.
    fn run() -> (Vec<Measurement>, ClusterVerdict, Vec<Option<String>>) {
        let schedule = crate::cluster::schedule::all_pairs(4).unwrap();
        let mut all = Vec::new();
        for (i, round) in schedule.rounds.iter().enumerate() {
            for p in &round.pairs {
                for (from, to) in [(p.client, p.server), (p.server, p.client)] {
                    let outcome = if from == 3 || to == 3 {
                        Outcome::PeerMissing
                    } else {
                        Outcome::Measured {
                            msg_rate_mpps: None,
                            bw_gbps: if from == 2 || to == 2 { 50.0 } else { 100.0 },
                            lat_us: Some(2.0),
                            latency: None,
                        }
                    };
                    all.push(Measurement {
                        round: i as u32,
                        from,
                        to,
                        rail: 0,
                        outcome,
                    });
                }
            }
        }
        let v = judge(4, &[3], &all, &Thresholds::default());
        let hosts = vec![
            Some("node-a".into()),
            Some("node-b".into()),
            Some("node-c\x1b[2J".into()),
            None,
        ];
        (all, v, hosts)
    }

    #[test]
    fn stdout_names_each_node_and_every_failed_direction_with_its_hosts() {
        let (all, v, hosts) = run();
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        assert_eq!(
            node_lines(&v, roster),
            [
                "rank 0 node-a: PASS 1 of 2 pairs failed (with a failing node), worst 50.00 Gb/s, 1 with a peer missing",
                "rank 1 node-b: PASS 1 of 2 pairs failed (with a failing node), worst 50.00 Gb/s, 1 with a peer missing",
                "rank 2 node-c?[2J: FAIL 2 of 2 pairs failed, worst 50.00 Gb/s, 1 with a peer missing",
                "rank 3 ?: MISSING",
            ]
        );
        let failures = failure_lines(&all, &v, roster);
        assert_eq!(failures.len(), 4, "{failures:#?}");
        assert!(
            failures
                .iter()
                .all(|l| l.contains("NODE rank 2")
                    && l.contains("50.00 Gb/s < 0.93 × best 100.00 Gb/s")),
            "{failures:#?}"
        );
    }

    #[test]
    fn a_node_whose_port_counters_rose_says_which_and_the_summary_lists_them() {
        let (all, _, hosts) = run();
        let mut facts = vec![crate::cluster::verdict::NodeFacts::default(); 4];
        facts[0].port_errors = vec![CounterRise {
            name: "hw_counters/out_of_seq_request\x1b[2J".into(),
            before: 0,
            after: 7,
        }];
        let v = crate::cluster::verdict::judge_with(4, &[3], &all, &Thresholds::default(), &facts);
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        assert_eq!(
            node_lines(&v, roster)[0],
            "rank 0 node-a: FAIL 1 of 2 pairs failed, worst 50.00 Gb/s, \
             1 with a peer missing; port error counters rose: hw_counters/out_of_seq_request?[2J 0 -> 7"
        );
        let json = serde_json::to_value(summary(&v, roster, 1.0)).unwrap();
        assert_eq!(json["nodes"][0]["verdict"], "FAIL");
        assert_eq!(json["nodes"][0]["port_errors"][0]["after"], 7, "{json:#}");
        assert_eq!(json["nodes"][1]["port_errors"], serde_json::json!([]));
    }

    #[test]
    fn a_node_whose_rails_differ_says_how_and_the_summary_lists_it() {
        let (all, _, hosts) = run();
        let mut facts = vec![crate::cluster::verdict::NodeFacts::default(); 4];
        facts[1].rail_findings =
            vec!["rail 5 mlx5_5:1 at 200 Gb/s, most ranks' rail 5 at 400 Gb/s".into()];
        let v = crate::cluster::verdict::judge_with(4, &[3], &all, &Thresholds::default(), &facts);
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        let line = &node_lines(&v, roster)[1];
        assert!(line.starts_with("rank 1 node-b: FAIL "), "{line}");
        assert!(
            line.ends_with("; rails: rail 5 mlx5_5:1 at 200 Gb/s, most ranks' rail 5 at 400 Gb/s"),
            "{line}"
        );
        let json = serde_json::to_value(summary(&v, roster, 1.0)).unwrap();
        assert_eq!(
            json["nodes"][1]["rail_findings"][0],
            "rail 5 mlx5_5:1 at 200 Gb/s, most ranks' rail 5 at 400 Gb/s"
        );
        assert_eq!(json["nodes"][0]["rail_findings"], serde_json::json!([]));
    }

    #[test]
    fn the_records_parse_as_json_and_name_hosts_verdicts_and_missing_ranks() {
        let (all, v, hosts) = run();
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        let names = Names::new(roster, 4, 1);
        let mut out = Vec::new();
        assert_eq!(write_pairs(&mut out, &all, &v, &names).unwrap(), 12);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 12);
        let line = lines[0];
        let back: serde_json::Value = serde_json::from_str(line).unwrap();
        for key in [
            "round",
            "src_rank",
            "src_host",
            "dst_rank",
            "dst_host",
            "outcome",
            "pass",
            "peer_missing",
            "reasons",
            "blame",
        ] {
            assert!(back.get(key).is_some(), "{key} in {line}");
        }
        let s: serde_json::Value = serde_json::to_value(summary(&v, roster, 12.5)).unwrap();
        assert_eq!(s["exit_code"], 4);
        assert_eq!(s["missing_ranks"], serde_json::json!([3]));
        assert_eq!(s["nodes"][2]["verdict"], "FAIL");
        assert_eq!(s["nodes"][3]["host"], "?");
        assert_eq!(s["duration_s"], 12.5);
    }

    #[test]
    fn the_metrics_carry_the_worst_directions_with_their_hosts_and_each_nodes_verdict() {
        let (all, v, hosts) = run();
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        let text = metrics(&all, &v, &Names::new(roster, 4, 1), 12.5, 64).render();
        assert!(
            text.contains("# TYPE rdmaperf_cluster_pair_bandwidth_gbps gauge\n"),
            "{text}"
        );
        // Host names as printable text: a peer's escape never reaches a
        // terminal that shows the file.
        assert!(
            text.contains(
                "rdmaperf_cluster_pair_bandwidth_gbps{src_rank=\"0\",src_host=\"node-a\",dst_rank=\"2\",dst_host=\"node-c?[2J\",round=\""
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "rdmaperf_cluster_node_pass{rank=\"2\",host=\"node-c?[2J\",verdict=\"FAIL\"} 0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "rdmaperf_cluster_node_pass{rank=\"3\",host=\"?\",verdict=\"MISSING\"} 0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("rdmaperf_cluster_ranks_missing 1\n"),
            "{text}"
        );
        assert!(
            text.contains("rdmaperf_cluster_run_duration_seconds 12.5\n"),
            "{text}"
        );
        // Per node and rail: rank 2's 4 judged directions (2 sent, 2
        // received), all failed, at 50 Gb/s.
        let rank2 = "{rank=\"2\",host=\"node-c?[2J\",rail=\"0\",device=\"?\"}";
        for (name, value) in [
            ("directions", "4"),
            ("failed_directions", "4"),
            ("worst_bandwidth_gbps", "50"),
            ("median_bandwidth_gbps", "50"),
        ] {
            let line = format!("rdmaperf_cluster_node_rail_{name}{rank2} {value}\n");
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(text.contains("rdmaperf_cluster_directions 6\n"), "{text}");
        assert!(
            text.contains("rdmaperf_cluster_directions_failed 4\n"),
            "{text}"
        );
        // Peer-missing directions have no pass sample and no bandwidth.
        assert!(!text.contains("dst_rank=\"3\""), "{text}");
    }

    #[test]
    fn only_the_k_worst_directions_are_series_errors_first() {
        let (mut all, _, hosts) = run();
        all[1].outcome = Outcome::Error {
            error: "timeout".into(),
        };
        let v = judge(4, &[3], &all, &Thresholds::default());
        let worst = worst_directions(&all, 3);
        assert_eq!(worst.len(), 3);
        assert_eq!(worst[0], 1, "the error first");
        for &i in &worst[1..] {
            assert_eq!(all[i].bw(), Some(50.0), "{:?}", all[i]);
        }
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        let text = metrics(&all, &v, &Names::new(roster, 4, 1), 1.0, 2).render();
        let series = |name: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .count()
        };
        assert_eq!(series("rdmaperf_cluster_pair_pass"), 2, "{text}");
        assert_eq!(series("rdmaperf_cluster_pair_bandwidth_gbps"), 1, "{text}");
        assert_eq!(series("rdmaperf_cluster_node_rail_pass"), 4, "{text}");
        assert!(
            metrics(&all, &v, &Names::new(roster, 4, 1), 1.0, 0)
                .render()
                .lines()
                .all(|l| !l.starts_with("rdmaperf_cluster_pair_"))
        );
    }

    #[test]
    fn a_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn the_plan_says_pairs_rounds_and_time_as_the_arithmetic_table() {
        let s = Rounds::AllPairs { size: 1_024 };
        assert_eq!(
            plan_line(Pattern::AllPairs, 1_024, &s, 5.0),
            "plan: all-pairs of 1024 ranks: 523776 pairs in 1023 rounds of up to 512 pairs, \
             about 85 min at 5 s a round"
        );
        let q = Rounds::from(crate::cluster::schedule::quick(7).unwrap());
        assert_eq!(
            plan_line(Pattern::Quick, 7, &q, 5.0),
            "plan: quick of 7 ranks: 3 pairs in 1 round of up to 3 pairs, about 5 s at 5 s a round"
        );
        assert_eq!(span(2.0 * 5_115.0), "2 h 51 min");
    }

    #[test]
    fn the_leaves_plan_says_groups_rounds_within_and_between_and_time() {
        let groups = |sizes: &[u32]| {
            let mut next = 0;
            sizes
                .iter()
                .map(|&s| {
                    next += s;
                    (next - s..next).collect::<Vec<Rank>>()
                })
                .collect::<Vec<_>>()
        };
        let leaves = |sizes: &[u32]| Rounds::from(Leaves::new(&groups(sizes)).unwrap());
        assert_eq!(
            plan_line(Pattern::Leaves, 16_384, &leaves(&[32; 512]), 5.0),
            "plan: leaves of 16384 ranks: 512 groups (32 ranks each), 1 intra-group round + \
             511 cross-group rounds, 4194304 pairs, about 43 min at 5 s a round"
        );
        assert_eq!(
            plan_line(Pattern::Leaves, 1_024, &leaves(&[32; 32]), 5.0),
            "plan: leaves of 1024 ranks: 32 groups (32 ranks each), 1 intra-group round + \
             31 cross-group rounds, 16384 pairs, about 3 min at 5 s a round"
        );
        // 7, 2 and 1 nodes: 3 + 1 pairs within; then (the bye's group's
        // nodes meeting the leftovers) 1 + 1, 1 + 2, 2 + 1 pairs.
        assert_eq!(
            plan_line(Pattern::Leaves, 10, &leaves(&[7, 2, 1]), 5.0),
            "plan: leaves of 10 ranks: 3 groups (sizes 1–7), 1 intra-group round + \
             3 cross-group rounds, 12 pairs, about 20 s at 5 s a round"
        );
        assert_eq!(span(523_776.0 * 5.0), "30.3 days");
    }

    /// Four leaves of four ranks (`node-R`), the leaves-like schedule,
    /// leaf 2's uplinks at 40 Gb/s: measurements, the layout, the hosts.
    fn slow_leaf() -> (
        Vec<Measurement>,
        crate::cluster::localise::LeafLayout,
        Vec<Option<String>>,
    ) {
        use crate::cluster::localise::fabricate::*;
        let groups = [4, 4, 4, 4];
        let layout = fat_tree(&groups, 1);
        let rounds = leaves_rounds(&members(&groups), 99);
        let ms = measure(&rounds, 1, slow_uplinks(&layout, 2, 0, 40.0));
        let hosts = (0..16).map(|r| Some(format!("node-{r}"))).collect();
        (ms, layout, hosts)
    }

    fn judged_with(
        ms: &[Measurement],
        layout: Option<&crate::cluster::localise::LeafLayout>,
    ) -> ClusterVerdict {
        crate::cluster::verdict::judge_with_layout(16, &[], ms, &Thresholds::default(), &[], layout)
    }

    #[test]
    fn a_switch_finding_comes_first_on_stdout_and_its_nodes_pass() {
        let (ms, layout, hosts) = slow_leaf();
        let v = judged_with(&ms, Some(&layout));
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        assert_eq!(
            switch_lines(&v),
            [
                "SWITCH leaf leaf2, rail 0: 24 of 24 cross-leaf directions failed, worst: \
              40.00 Gb/s < 0.93 × best 100.00 Gb/s; its nodes pass within the leaf \
              (4 of 4 directions passed): suspect its uplinks"
            ]
        );
        let nodes = node_lines(&v, roster);
        assert_eq!(
            nodes[8],
            "rank 8 node-8: PASS 3 of 4 pairs failed (across a failing switch), worst 40.00 Gb/s"
        );
        assert_eq!(
            nodes[0],
            "rank 0 node-0: PASS 1 of 4 pairs failed (across a failing switch), worst 40.00 Gb/s"
        );
        let failures = failure_lines(&ms, &v, roster);
        assert_eq!(failures.len(), 24);
        assert!(
            failures
                .iter()
                .all(|l| l.contains(": SWITCH leaf leaf2: 40.00 Gb/s < 0.93")),
            "{failures:#?}"
        );
        // Without a topology: no switch line, the leaf's nodes FAIL.
        let blind = judged_with(&ms, None);
        assert!(switch_lines(&blind).is_empty());
        assert!(
            node_lines(&blind, roster)[8].starts_with("rank 8 node-8: FAIL 3 of 4 pairs failed")
        );
    }

    #[test]
    fn summary_json_lists_the_switches_and_pairs_jsonl_names_the_switch() {
        let (ms, layout, hosts) = slow_leaf();
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        let v = judged_with(&ms, Some(&layout));
        let text = serde_json::to_string_pretty(&summary(&v, roster, 3.0)).unwrap();
        let s: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (s["pass"].clone(), s["exit_code"].clone()),
            (false.into(), 3.into())
        );
        let sw = &s["switches"];
        assert_eq!(sw.as_array().unwrap().len(), 1, "{sw:#}");
        assert_eq!(sw[0]["kind"], "uplinks");
        assert_eq!(sw[0]["name"], "leaf2");
        assert_eq!(sw[0]["rail"], 0);
        assert_eq!(sw[0]["nodes"], 4);
        assert_eq!(sw[0]["cross_measured"], 24);
        assert_eq!(sw[0]["cross_failed"], 24);
        assert_eq!(sw[0]["intra_measured"], 4);
        assert_eq!(sw[0]["intra_failed"], 0);
        assert_eq!(sw[0]["worst_bw_gbps"], 40.0);
        assert!(
            sw[0]["message"]
                .as_str()
                .unwrap()
                .ends_with("suspect its uplinks")
        );
        assert!(sw[0].get("peer_name").is_none());
        assert!(
            s["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|n| n["verdict"] == "PASS")
        );
        assert_eq!(s["nodes"][8]["switch_failed"], 3);
        assert!(s["nodes"][4].get("switch_failed").is_some());
        // pairs.jsonl: the switch's directions name it.
        let names = Names::new(roster, 16, 1);
        let mut out = Vec::new();
        write_pairs(&mut out, &ms, &v, &names).unwrap();
        let records: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let switched: Vec<_> = records.iter().filter(|r| r["blame"] == "switch").collect();
        assert_eq!(switched.len(), 24);
        assert!(
            switched
                .iter()
                .all(|r| r["switch"] == "leaf2" && r.get("switch_peer").is_none())
        );
        assert!(
            records
                .iter()
                .filter(|r| r["blame"] != "switch")
                .all(|r| r.get("switch").is_none())
        );
        // Without a topology the summary has no switches and no node
        // a switch count: today's file.
        let blind = judged_with(&ms, None);
        let s = serde_json::to_value(summary(&blind, roster, 3.0)).unwrap();
        assert!(s.get("switches").is_none());
        assert!(
            s["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|n| n.get("switch_failed").is_none())
        );
    }

    #[test]
    fn metrics_carry_a_series_set_per_leaf_and_rail_the_named_first_and_capped() {
        let (ms, layout, hosts) = slow_leaf();
        let roster = Roster {
            rails: &[],
            hosts: &hosts,
            devices: &[],
        };
        let v = judged_with(&ms, Some(&layout));
        let text = metrics(&ms, &v, &Names::new(roster, 16, 1), 1.0, 4).render();
        for line in [
            "# TYPE rdmaperf_cluster_switch_pass gauge\n",
            "rdmaperf_cluster_switch_pass{switch=\"leaf2\",rail=\"0\",verdict=\"SWITCH\"} 0\n",
            "rdmaperf_cluster_switch_pass{switch=\"leaf0\",rail=\"0\",verdict=\"PASS\"} 1\n",
            "rdmaperf_cluster_switch_cross_directions{switch=\"leaf2\",rail=\"0\"} 24\n",
            "rdmaperf_cluster_switch_cross_failed_directions{switch=\"leaf2\",rail=\"0\"} 24\n",
            "rdmaperf_cluster_switch_cross_failed_directions{switch=\"leaf0\",rail=\"0\"} 8\n",
            "rdmaperf_cluster_switch_intra_directions{switch=\"leaf2\",rail=\"0\"} 4\n",
            "rdmaperf_cluster_switch_intra_failed_directions{switch=\"leaf2\",rail=\"0\"} 0\n",
            "rdmaperf_cluster_switch_nodes{switch=\"leaf2\",rail=\"0\"} 4\n",
            "rdmaperf_cluster_switch_worst_cross_bandwidth_gbps{switch=\"leaf2\",rail=\"0\"} 40\n",
            "rdmaperf_cluster_switches_named 1\n",
            "rdmaperf_cluster_switches_judged 4\n",
            "rdmaperf_cluster_pass 0\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        // Without a topology: no switch series at all.
        let blind = judged_with(&ms, None);
        let text = metrics(&ms, &blind, &Names::new(roster, 16, 1), 1.0, 4).render();
        assert!(!text.contains("rdmaperf_cluster_switch"), "{text}");
    }

    #[test]
    fn more_leaves_than_the_cap_keep_the_named_one() {
        use crate::cluster::localise::fabricate::*;
        // 1,100 leaves of two ranks; the slow one beyond the cap in
        // switch order.
        let groups = vec![2; 1_100];
        let layout = fat_tree(&groups, 1);
        let ms = measure(
            &leaves_rounds(&members(&groups), 2),
            1,
            slow_uplinks(&layout, 1_050, 0, 40.0),
        );
        let v = crate::cluster::verdict::judge_with_layout(
            2_200,
            &[],
            &ms,
            &Thresholds::default(),
            &[],
            Some(&layout),
        );
        assert_eq!(v.switches.len(), 1, "{:#?}", v.switches);
        let roster = Roster {
            rails: &[],
            hosts: &[],
            devices: &[],
        };
        let text = metrics(&ms, &v, &Names::new(roster, 2_200, 1), 1.0, 0).render();
        let pass_lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("rdmaperf_cluster_switch_pass{"))
            .collect();
        assert_eq!(pass_lines.len(), PROM_MAX_SWITCHES);
        assert_eq!(
            pass_lines[0],
            "rdmaperf_cluster_switch_pass{switch=\"leaf1050\",rail=\"0\",verdict=\"SWITCH\"} 0"
        );
        assert!(text.contains("rdmaperf_cluster_switches_judged 1100\n"));
    }
}
