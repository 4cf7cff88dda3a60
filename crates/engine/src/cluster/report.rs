//! What rank 0 writes: before the first round the plan ([`plan_line`]);
//! at the end, from the measurements and their verdicts, one line per
//! node and per failed direction for
//! stdout ([`node_lines`], [`failure_lines`]), the records of
//! `pairs.jsonl` ([`pair_records`]) and `summary.json` ([`summary`]),
//! and the Prometheus text of `metrics.prom` ([`metrics`]). No I/O: the
//! driver writes the files (`.partial`, renamed into place).

use serde::Serialize;

use super::schedule::{Pattern, Rank, Rounds};
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
pub fn plan_line(pattern: Pattern, size: u32, rounds: &Rounds, per_round_s: f64) -> String {
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
    pub src_host: String,
    /// The receiving rank.
    pub dst_rank: Rank,
    /// The receiving rank's host.
    pub dst_host: String,
    /// The sending rank's device on that rail, `DEV:PORT`.
    pub src_device: String,
    /// The receiving rank's device.
    pub dst_device: String,
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
}

/// The records of `pairs.jsonl`, in the measurements' order.
pub fn pair_records<'a>(
    measurements: &'a [Measurement],
    verdict: &'a ClusterVerdict,
    roster: Roster<'_>,
) -> Vec<PairRecord<'a>> {
    measurements
        .iter()
        .zip(&verdict.directions)
        .map(|(m, d)| PairRecord {
            round: m.round,
            rail: m.rail,
            src_rank: m.from,
            src_host: roster.host(m.from),
            dst_rank: m.to,
            dst_host: roster.host(m.to),
            src_device: roster.rail_device(m.from, m.rail),
            dst_device: roster.rail_device(m.to, m.rail),
            outcome: &m.outcome,
            min_bw_gbps: d.min_bw_gbps,
            pass: d.pass,
            peer_missing: d.peer_missing,
            reasons: &d.reasons,
            blame: d.blame,
        })
        .collect()
}

/// One line of `pair-sums.jsonl` (with more than one rail): one direction
/// of one node pair, its rails' bandwidths added up — what the two nodes
/// move between them at once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairSum {
    /// The round.
    pub round: u32,
    /// The sending rank.
    pub src_rank: Rank,
    /// Its host.
    pub src_host: String,
    /// The receiving rank.
    pub dst_rank: Rank,
    /// Its host.
    pub dst_host: String,
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

/// The records of `pair-sums.jsonl`: per direction of each node pair in
/// each round, its rails added up, in the order they were first measured.
pub fn pair_sums(
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
) -> Vec<PairSum> {
    let mut at: std::collections::HashMap<(u32, Rank, Rank), usize> =
        std::collections::HashMap::new();
    let mut out: Vec<PairSum> = Vec::new();
    for (m, d) in measurements.iter().zip(&verdict.directions) {
        let i = *at.entry((m.round, m.from, m.to)).or_insert_with(|| {
            out.push(PairSum {
                round: m.round,
                src_rank: m.from,
                src_host: roster.host(m.from),
                dst_rank: m.to,
                dst_host: roster.host(m.to),
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
        slow_rounds: verdict.rounds.iter().filter(|r| r.slow).collect(),
        best_bw_gbps: verdict.best_bw_gbps,
        rail_best_bw_gbps: &verdict.rail_best_bw_gbps,
        min_lat_us: verdict.min_lat_us,
        duration_s,
    }
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
                    // Each with a failing node: that node's finding.
                    line.push_str(" (with a failing node)");
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

/// `metrics.prom`: per-direction bandwidth and verdict with their hosts,
/// per-node verdicts, the missing ranks, slow rounds and the run's time.
pub fn metrics(
    measurements: &[Measurement],
    verdict: &ClusterVerdict,
    roster: Roster<'_>,
    duration_s: f64,
) -> Exposition {
    let mut e = Exposition::new();
    for (m, d) in measurements.iter().zip(&verdict.directions) {
        let (src, dst, round) = (m.from.to_string(), m.to.to_string(), m.round.to_string());
        let (src_host, dst_host) = (roster.host(m.from), roster.host(m.to));
        let rail = m.rail.to_string();
        let labels = [
            ("src_rank", src.as_str()),
            ("src_host", src_host.as_str()),
            ("dst_rank", dst.as_str()),
            ("dst_host", dst_host.as_str()),
            ("round", round.as_str()),
            ("rail", rail.as_str()),
        ];
        if let Outcome::Measured {
            bw_gbps, lat_us, ..
        } = m.outcome
        {
            e.sample(
                "rdmaperf_cluster_pair_bandwidth_gbps",
                "Bandwidth of one direction of one pair, Gb/s.",
                MetricType::Gauge,
                &labels,
                bw_gbps,
            );
            if let Some(lat) = lat_us {
                e.sample(
                    "rdmaperf_cluster_pair_latency_seconds",
                    "Latency of one direction of one pair (the percentile judged), seconds.",
                    MetricType::Gauge,
                    &labels,
                    lat / 1e6,
                );
            }
        }
        if !d.peer_missing {
            e.sample(
                "rdmaperf_cluster_pair_pass",
                "1 when one direction of one pair passed its verdicts, 0 when it failed.",
                MetricType::Gauge,
                &labels,
                f64::from(u8::from(d.pass)),
            );
        }
    }
    for n in &verdict.nodes {
        let (rank, host) = (n.rank.to_string(), roster.host(n.rank));
        e.sample(
            "rdmaperf_cluster_node_pass",
            "1 when a node passed (every pair it measured passed), else 0; its verdict word in `verdict`.",
            MetricType::Gauge,
            &[("rank", &rank), ("host", &host), ("verdict", n.status.word())],
            f64::from(u8::from(n.status == NodeStatus::Pass)),
        );
    }
    let missing = verdict
        .nodes
        .iter()
        .filter(|n| n.status == NodeStatus::Missing)
        .count();
    let gauges = [
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
        let records = pair_records(&all, &v, roster);
        assert_eq!(records.len(), 12);
        let line = serde_json::to_string(&records[0]).unwrap();
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
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
    fn the_metrics_carry_each_direction_with_its_hosts_and_each_nodes_verdict() {
        let (all, v, hosts) = run();
        let text = metrics(
            &all,
            &v,
            Roster {
                rails: &[],
                hosts: &hosts,
                devices: &[],
            },
            12.5,
        )
        .render();
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
        // Peer-missing directions have no pass sample and no bandwidth.
        assert!(!text.contains("dst_rank=\"3\""), "{text}");
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
        assert_eq!(span(523_776.0 * 5.0), "30.3 days");
    }
}
