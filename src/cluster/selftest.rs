//! The node self-test: `rdmaperf cluster` with one rank (what a
//! scheduler's prolog runs before it gives a node to a job). No peers:
//! rail k meets rail k+1 of the same host (the ring over its rails, so
//! every rail serves and sends), both directions of each pair, the pairs
//! of a round at the same time; the same tests, thresholds and verdicts
//! as between nodes, with the rails in the place of ranks (a rail whose
//! pairs mostly fail is FAIL, a lone failed pair a LINK finding). The
//! out-of-band exchange of each direction runs over loopback; the data
//! crosses the rails' fabric. Each side runs in a thread bound to its
//! rail's NUMA node.

use std::io::Write as _;
use std::thread;
use std::time::Instant;

use engine::cluster::pair_test::PairTest;
use engine::cluster::rails::Rail;
use engine::cluster::schedule::{self, Rank, Schedule};
use engine::cluster::verdict::{self, Measurement, NodeFacts, Outcome};

use super::ClusterPlan;
use super::pair;
use super::rank::{node_rails, rail_device};
use crate::exit::UsageError;
use crate::oob::Listener;
use crate::options::DeviceSelection;
use crate::placement::NicNodeBinding;

/// Runs the self-test on this node's rails; the exit code (0 pass, 3 a
/// FAIL verdict).
///
/// # Errors
/// Fewer than 2 rails (a usage error naming them), or stdout closed.
pub fn run(plan: &ClusterPlan) -> anyhow::Result<u8> {
    let started = Instant::now();
    let rails = node_rails(plan)?;
    if rails.len() < 2 {
        let named: Vec<String> = rails.iter().map(Rail::name).collect();
        return Err(UsageError(format!(
            "one rank is the node self-test, rail k against rail k+1: it needs 2 rails or more \
             (--rails), this node has {}{}",
            rails.len(),
            if named.is_empty() {
                String::new()
            } else {
                format!(": {}", named.join(", "))
            }
        ))
        .into());
    }
    let n = rails.len() as Rank;
    let schedule = schedule::ring(n)?;
    let test = &plan.test;
    let per_round = 2.0 * (f64::from(test.duration_s) + if test.latency { 1.0 } else { 0.0 });
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "plan: self-test of {n} rails: {} pairs, both directions, in {} rounds, about {:.0} s ({})",
        schedule.pair_count(),
        schedule.rounds.len(),
        schedule.estimate_seconds(per_round),
        test.describe()
    )
    .map_err(crate::exit::stdout_write_error)?;
    let all = measure_rails(
        &RailTest {
            test: &plan.test,
            gid_index: plan.device.gid_index,
            numa: plan.numa.as_ref(),
        },
        &rails,
        &schedule,
    );
    let v = verdict::judge_with(
        n,
        &[],
        &all,
        &plan.coordinating.thresholds,
        &rail_facts(&rails),
    );
    for node in &v.nodes {
        let mut line = format!(
            "rail {} {}: {} {} of {} pairs failed",
            node.rank,
            rails[node.rank as usize].name(),
            node.status.word(),
            node.failed,
            node.pairs
        );
        if let Some(w) = node.worst_bw_gbps {
            line.push_str(&format!(", worst {} Gb/s", verdict::gbps(w)));
        }
        writeln!(out, "{line}").map_err(crate::exit::stdout_write_error)?;
    }
    for (m, d) in all.iter().zip(&v.directions) {
        let figure = match &m.outcome {
            Outcome::Measured {
                bw_gbps, lat_us, ..
            } => match lat_us {
                Some(l) => format!("{} Gb/s, {l:.2} us", verdict::gbps(*bw_gbps)),
                None => format!("{} Gb/s", verdict::gbps(*bw_gbps)),
            },
            Outcome::Error { error } => format!("error: {error}"),
            Outcome::PeerMissing => "not measured".into(),
        };
        let mut line = format!(
            "rail {} {} -> rail {} {}: {figure}",
            m.from,
            rails[m.from as usize].name(),
            m.to,
            rails[m.to as usize].name(),
        );
        if !d.pass {
            let why: Vec<String> = d.reasons.iter().map(|r| r.line()).collect();
            line.push_str(&format!(": FAIL: {}", why.join("; ")));
        }
        writeln!(out, "{line}").map_err(crate::exit::stdout_write_error)?;
    }
    let code = v.exit_code();
    writeln!(
        out,
        "self-test: {} in {:.1} s: exit code {code}",
        if code == 0 { "PASS" } else { "FAIL" },
        started.elapsed().as_secs_f64()
    )
    .map_err(crate::exit::stdout_write_error)?;
    Ok(code)
}

/// Each rail's facts for the verdicts (its negotiated rate), the rails
/// standing in for ranks.
pub fn rail_facts(rails: &[Rail]) -> Vec<NodeFacts> {
    rails
        .iter()
        .map(|r| NodeFacts {
            rate_gbps: r.rate_gbps,
            ..NodeFacts::default()
        })
        .collect()
}

/// What the directions between one node's rails run: the test, the GID
/// index (`-x`) and the NUMA binding of each side's thread (none under
/// `--simulate` or a restricted start). `rdmaperf cluster` with one rank
/// and `rdmaperf health --active` both measure through it.
#[derive(Debug, Clone, Copy)]
pub struct RailTest<'a> {
    /// The test each direction runs.
    pub test: &'a PairTest,
    /// `-x`.
    pub gid_index: Option<u32>,
    /// Each side's thread bound to its NIC's NUMA node.
    pub numa: Option<&'a NicNodeBinding>,
}

impl RailTest<'_> {
    fn bind(&self, device: &DeviceSelection) {
        super::rank::bind_to_nic_of(self.numa, device);
    }
}

/// Every direction of every pair of `schedule` (ranks are indices into
/// `rails`), the pairs of a round at the same time, the rounds in order.
/// Every direction's wait is bounded by the test's `timeout_s`.
pub fn measure_rails(rt: &RailTest<'_>, rails: &[Rail], schedule: &Schedule) -> Vec<Measurement> {
    let mut all: Vec<Measurement> = Vec::new();
    for (index, round) in schedule.rounds.iter().enumerate() {
        let index = index as u32;
        let measured: Vec<Vec<Measurement>> = thread::scope(|s| {
            let handles: Vec<_> = round
                .pairs
                .iter()
                .map(|p| {
                    s.spawn(move || {
                        vec![
                            direction(rt, rails, p.client, p.server, index),
                            direction(rt, rails, p.server, p.client, index),
                        ]
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        all.extend(measured.into_iter().flatten());
    }
    all
}

/// Data from rail `from` to rail `to`: `to` serves on a loopback
/// listener, `from` drives the test against it.
fn direction(rt: &RailTest<'_>, rails: &[Rail], from: Rank, to: Rank, round: u32) -> Measurement {
    let device = |r: Rank| rail_device(&rails[r as usize], rt.gid_index);
    let listener = match Listener::bind("127.0.0.1", 0) {
        Ok(l) => l,
        Err(e) => {
            return Measurement {
                round,
                from,
                to,
                rail: 0,
                outcome: Outcome::Error {
                    error: format!("cannot listen on loopback: {e:#}"),
                },
            };
        }
    };
    let (server_device, client_device) = (device(to), device(from));
    // Each side on its own NIC's NUMA node, as between nodes.
    thread::scope(|s| {
        let server = s.spawn(|| {
            rt.bind(&server_device);
            pair::serve(rt.test, &server_device, &listener)
        });
        rt.bind(&client_device);
        let m = pair::send_to(
            rt.test,
            &client_device,
            (from, to),
            (round, 0),
            ("127.0.0.1", listener.port()),
            &[],
        );
        // The server's error, if any, is the client's measurement's too.
        let _ = server.join();
        m
    })
}
