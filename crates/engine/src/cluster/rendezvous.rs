//! The coordinator's (rank 0's) two state machines, with no I/O and time
//! passed in: [`Gathering`] collects every rank's identity until all have
//! come or the deadline passes; [`RoundTracker`] follows one round of
//! pair tests until every live rank in it has reported or its deadline
//! passes, and turns what came back (or did not) into [`Measurement`]s
//! for the verdicts. The driver moves the bytes and calls these with what
//! arrived; one bad rank is a finding, never a wait without end.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::rails::{MAX_RAILS, Rail};
use super::schedule::{Rank, Round};
use super::verdict::{Measurement, Outcome};

/// Longest host name kept from a rank's identity, in bytes (a DNS name is
/// at most 253).
pub const MAX_HOST_LEN: usize = 255;

/// What a rank tells the coordinator when it arrives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// Its rank.
    pub rank: Rank,
    /// The job's size as it sees it.
    pub size: u32,
    /// Its rdmaperf version.
    pub version: String,
    /// Its host name.
    pub host: String,
    /// The TCP port of its pair listener (bound before it joined, held
    /// open: no free-port race).
    pub pair_port: u16,
    /// The address its partners reach that listener at (the local
    /// address of its connection to the coordinator, or `--pair-address`).
    pub address: String,
    /// Its RDMA device and port, as `DEV:PORT` (for the reports).
    pub device: String,
    /// That port's negotiated rate, Gb/s, when it could be read (for
    /// `--expect-rate auto`).
    #[serde(default)]
    pub rate_gbps: Option<f64>,
    /// Its rails, rail 0 first (empty under `--simulate`): at most
    /// [`MAX_RAILS`], checked across ranks by [`super::rails::findings`].
    #[serde(default)]
    pub rails: Vec<Rail>,
    /// The TCP ports of its pair listeners for rails 1, 2, ... (rail 0's
    /// is `pair_port`): one per rail it tests on, at most
    /// [`MAX_RAILS`] − 1.
    #[serde(default)]
    pub rail_ports: Vec<u16>,
    /// Where Slurm's topology/tree plugin says it sits, when it ran under
    /// it: `SLURM_TOPOLOGY_ADDR` and `SLURM_TOPOLOGY_ADDR_PATTERN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_addr: Option<TopologyAddr>,
}

/// A task's `SLURM_TOPOLOGY_ADDR` (its switches from the top down, then
/// its node, dot-separated: `spine0.leaf7.node1`) and
/// `SLURM_TOPOLOGY_ADDR_PATTERN` (`switch.switch.node`), as Slurm set them
/// (slurm.conf's `TopologyPlugin=topology/tree`; measured in the VM:
/// ../shared/reference/health-and-topology.md §3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyAddr {
    /// `SLURM_TOPOLOGY_ADDR`.
    pub addr: String,
    /// `SLURM_TOPOLOGY_ADDR_PATTERN`.
    pub pattern: String,
}

impl TopologyAddr {
    /// Both variables from `env`, when both are set and not empty.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let addr = env("SLURM_TOPOLOGY_ADDR").filter(|v| !v.is_empty())?;
        let pattern = env("SLURM_TOPOLOGY_ADDR_PATTERN").filter(|v| !v.is_empty())?;
        Some(Self { addr, pattern })
    }
}

impl Identity {
    /// How many rails it tests on: one listener each.
    pub fn rail_count(&self) -> u32 {
        1 + self.rail_ports.len() as u32
    }

    /// Rail k's pair port.
    pub fn rail_port(&self, rail: u32) -> Option<u16> {
        match rail {
            0 => Some(self.pair_port),
            k => self.rail_ports.get(k as usize - 1).copied(),
        }
    }
}

/// How many rails a pair of ranks with `a` and `b` rails runs on: the
/// rails both have, rail k with rail k (rail 0 at least).
pub fn shared_rails(a: u32, b: u32) -> u32 {
    a.min(b).max(1)
}

/// Why the coordinator turned an arriving rank away.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JoinError {
    /// Its size differs from the coordinator's.
    #[error("rank {rank} on {host} says the job has {theirs} ranks, rank 0 says {ours}")]
    SizeMismatch {
        /// Its rank.
        rank: Rank,
        /// Its host.
        host: String,
        /// Its size.
        theirs: u32,
        /// The coordinator's size.
        ours: u32,
    },
    /// Its version differs from the coordinator's.
    #[error(
        "rank {rank} on {host} runs rdmaperf {theirs}, rank 0 runs {ours}: one version on every node"
    )]
    VersionMismatch {
        /// Its rank.
        rank: Rank,
        /// Its host.
        host: String,
        /// Its version.
        theirs: String,
        /// The coordinator's.
        ours: String,
    },
    /// Its rank is not below the size.
    #[error("rank {rank} on {host} is out of range: the job has {size} ranks")]
    RankOutOfRange {
        /// Its rank.
        rank: Rank,
        /// Its host.
        host: String,
        /// The job's size.
        size: u32,
    },
    /// Another process already holds its rank.
    #[error("rank {rank} arrived twice: from {first_host} and from {host}")]
    DuplicateRank {
        /// The rank.
        rank: Rank,
        /// Where it came from first.
        first_host: String,
        /// Where it came from now.
        host: String,
    },
    /// A text field (host name, address, device) is empty, longer than
    /// [`MAX_HOST_LEN`], or holds a control character (it is printed in
    /// reports and on terminals).
    #[error(
        "rank {rank} sent a {field} of {len} bytes (1 to {MAX_HOST_LEN}, no control characters)"
    )]
    BadHost {
        /// Its rank.
        rank: Rank,
        /// Which field: `host name`, `address`, `device`, `rail device`
        /// or `rail link layer`.
        field: &'static str,
        /// The field's length.
        len: usize,
    },
    /// More rails than [`MAX_RAILS`].
    #[error("rank {rank} sent {count} rails (at most {MAX_RAILS})")]
    TooManyRails {
        /// Its rank.
        rank: Rank,
        /// How many it sent.
        count: usize,
    },
    /// It came after the table went out.
    #[error("rank {rank} on {host} arrived after the rendezvous ended")]
    Late {
        /// Its rank.
        rank: Rank,
        /// Its host.
        host: String,
    },
}

/// Where the gathering stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatheringState {
    /// Still waiting, at most until this instant.
    Waiting(Instant),
    /// Every rank is here.
    Complete,
    /// The deadline passed with these ranks missing (in rank order).
    TimedOut(Vec<Rank>),
}

/// Rank 0 collecting identities: every rank must arrive by the deadline.
#[derive(Debug, Clone)]
pub struct Gathering {
    size: u32,
    version: String,
    deadline: Instant,
    members: Vec<Option<Identity>>,
    closed: bool,
}

impl Gathering {
    /// Waits for `size` ranks of `version` until `started + timeout`.
    pub fn new(size: u32, version: &str, started: Instant, timeout: Duration) -> Self {
        Self {
            size,
            version: version.to_owned(),
            deadline: started + timeout,
            members: vec![None; size as usize],
            closed: false,
        }
    }

    /// A rank arrived with `id`. Refused ranks are not counted; the
    /// driver answers them with the error and closes their connection.
    pub fn join(&mut self, id: Identity) -> Result<(), JoinError> {
        let Identity { rank, .. } = id;
        let host = id.host.clone();
        if id.rails.len() > MAX_RAILS || id.rail_ports.len() >= MAX_RAILS {
            return Err(JoinError::TooManyRails {
                rank,
                count: id.rails.len().max(id.rail_ports.len() + 1),
            });
        }
        let rail_texts = id.rails.iter().flat_map(|r| {
            std::iter::once(("rail device", &r.device))
                .chain(r.link_layer.as_ref().map(|l| ("rail link layer", l)))
                .chain(r.address.as_ref().map(|a| ("rail address", a)))
        });
        for (field, text) in [
            ("host name", &id.host),
            ("address", &id.address),
            ("device", &id.device),
        ]
        .into_iter()
        .chain(rail_texts)
        {
            if text.is_empty() || text.len() > MAX_HOST_LEN || text.chars().any(char::is_control) {
                return Err(JoinError::BadHost {
                    rank,
                    field,
                    len: text.len(),
                });
            }
        }
        if self.closed {
            return Err(JoinError::Late { rank, host });
        }
        if id.size != self.size {
            return Err(JoinError::SizeMismatch {
                rank,
                host,
                theirs: id.size,
                ours: self.size,
            });
        }
        if id.version != self.version {
            return Err(JoinError::VersionMismatch {
                rank,
                host,
                theirs: id.version,
                ours: self.version.clone(),
            });
        }
        let Some(slot) = self.members.get_mut(rank as usize) else {
            return Err(JoinError::RankOutOfRange {
                rank,
                host,
                size: self.size,
            });
        };
        if let Some(first) = slot {
            return Err(JoinError::DuplicateRank {
                rank,
                first_host: first.host.clone(),
                host,
            });
        }
        *slot = Some(id);
        Ok(())
    }

    /// A rank's connection closed before the table went out: its place is
    /// free again (it may retry).
    pub fn left(&mut self, rank: Rank) {
        if !self.closed
            && let Some(slot) = self.members.get_mut(rank as usize)
        {
            *slot = None;
        }
    }

    /// Where the gathering stands at `now`.
    pub fn poll(&self, now: Instant) -> GatheringState {
        if self.members.iter().all(Option::is_some) {
            GatheringState::Complete
        } else if now >= self.deadline {
            GatheringState::TimedOut(self.missing())
        } else {
            GatheringState::Waiting(self.deadline)
        }
    }

    /// The ranks not here, in rank order.
    pub fn missing(&self) -> Vec<Rank> {
        (0..self.size)
            .filter(|&r| self.members[r as usize].is_none())
            .collect()
    }

    /// Ends the gathering (complete or not): the table of who came, in
    /// rank order, `None` for a missing rank. Later arrivals are
    /// [`JoinError::Late`].
    pub fn close(&mut self) -> Vec<Option<Identity>> {
        self.closed = true;
        self.members.clone()
    }
}

/// What one rank reports at the end of a round: what it measured, as the
/// pair's client (both directions), or the error that ended its side.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundReport {
    /// The reporting rank.
    pub rank: Rank,
    /// Its measurements (the pair's directions, or none when it idled or
    /// served a test that succeeded: the client reports the figures).
    pub measurements: Vec<Measurement>,
}

/// Where a round stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundState {
    /// Reports still owed, at most until this instant.
    Waiting(Instant),
    /// Every live rank reported, or the deadline passed: collect it with
    /// [`RoundTracker::finish`].
    Done,
}

/// One round at the coordinator: which ranks owe a report, what came.
#[derive(Debug, Clone)]
pub struct RoundTracker {
    index: u32,
    round: Round,
    deadline: Instant,
    /// Ranks alive at the start of the round.
    alive: Vec<bool>,
    /// Each rank's partner this round, if it has one (O(1) per report:
    /// 1,024 ranks report in each round).
    partners: Vec<Option<Rank>>,
    reports: Vec<Option<RoundReport>>,
    /// Live ranks of the round's pairs that have not reported.
    owed: usize,
    /// Per rank, how many rails it tests on (absent: one).
    rails: Vec<u32>,
}

impl RoundTracker {
    /// Round `index` of the schedule starts at `now` and ends at `now +
    /// budget` at the latest; `alive[r]` says whether rank `r` is still
    /// in the run.
    pub fn start(
        index: u32,
        round: &Round,
        alive: &[bool],
        now: Instant,
        budget: Duration,
    ) -> Self {
        let mut partners = vec![None; alive.len()];
        let mut owed = 0;
        for p in &round.pairs {
            for (r, other) in [(p.server, p.client), (p.client, p.server)] {
                if let Some(slot) = partners.get_mut(r as usize) {
                    *slot = Some(other);
                    owed += usize::from(alive[r as usize]);
                }
            }
        }
        Self {
            index,
            round: round.clone(),
            deadline: now + budget,
            alive: alive.to_vec(),
            partners,
            reports: vec![None; alive.len()],
            owed,
            rails: Vec::new(),
        }
    }

    /// Per rank, how many rails it tests on ([`Identity::rail_count`]): a
    /// pair runs on the rails both have, rail k with rail k.
    #[must_use]
    pub fn with_rails(mut self, rails: Vec<u32>) -> Self {
        self.rails = rails;
        self
    }

    /// How many rails `a` and `b` share.
    fn shared_rails(&self, a: Rank, b: Rank) -> u32 {
        let of = |r: Rank| self.rails.get(r as usize).copied().unwrap_or(1);
        shared_rails(of(a), of(b))
    }

    fn is_alive(&self, r: Rank) -> bool {
        self.alive.get(r as usize).copied().unwrap_or(false)
    }

    /// The ranks that owe a report: the live ranks of its pairs.
    pub fn owed(&self) -> Vec<Rank> {
        let mut out: Vec<Rank> = self
            .round
            .pairs
            .iter()
            .flat_map(|p| [p.server, p.client])
            .filter(|&r| self.is_alive(r) && self.reports[r as usize].is_none())
            .collect();
        out.sort_unstable();
        out
    }

    /// A rank's report. Measurements that are not of this round's pair of
    /// that rank are dropped (a confused or hostile peer cannot write
    /// another pair's figures); a second report is ignored.
    pub fn report(&mut self, mut report: RoundReport) {
        let rank = report.rank;
        let Some(partner) = self.partner(rank) else {
            return;
        };
        let rails = self.shared_rails(rank, partner);
        report.measurements.retain(|m| {
            m.round == self.index
                && m.rail < rails
                && ((m.from == rank && m.to == partner) || (m.from == partner && m.to == rank))
        });
        if self.is_alive(rank)
            && let Some(slot) = self.reports.get_mut(rank as usize)
            && slot.is_none()
        {
            *slot = Some(report);
            self.owed -= 1;
        }
    }

    /// A rank died (its connection closed) during the round.
    pub fn lost(&mut self, rank: Rank) {
        let owed_by_it = self.is_alive(rank)
            && self.partner(rank).is_some()
            && self.reports[rank as usize].is_none();
        if let Some(a) = self.alive.get_mut(rank as usize) {
            *a = false;
        }
        self.owed -= usize::from(owed_by_it);
    }

    fn partner(&self, rank: Rank) -> Option<Rank> {
        self.partners.get(rank as usize).copied().flatten()
    }

    /// Where the round stands at `now`.
    pub fn poll(&self, now: Instant) -> RoundState {
        if self.owed == 0 || now >= self.deadline {
            RoundState::Done
        } else {
            RoundState::Waiting(self.deadline)
        }
    }

    /// The round's measurements, both directions of every pair, and the
    /// ranks that owed a report and sent none (alive but silent past the
    /// deadline: the driver drops them from the run).
    ///
    /// Per pair: a dead rank (before or during the round) makes both
    /// directions [`Outcome::PeerMissing`]; else the client's figures, or
    /// failing those the server's; a direction nobody reported is
    /// [`Outcome::PeerMissing`] when one of its ranks was silent (it
    /// leaves the run, named missing), else an [`Outcome::Error`] saying
    /// so.
    pub fn finish(self) -> (Vec<Measurement>, Vec<Rank>) {
        let silent = self.owed();
        let mut is_silent = vec![false; self.alive.len()];
        for &r in &silent {
            is_silent[r as usize] = true;
        }
        let mut out = Vec::with_capacity(self.round.pairs.len() * 2);
        let directions = self.round.pairs.iter().flat_map(|p| {
            (0..self.shared_rails(p.client, p.server)).flat_map(move |rail| {
                [(p.client, p.server), (p.server, p.client)].map(|(from, to)| (p, rail, from, to))
            })
        });
        for (p, rail, from, to) in directions {
            let dead = !self.is_alive(p.server) || !self.is_alive(p.client);
            // A rank silent past the deadline leaves the run with it (it
            // is named missing): a direction of its that nobody reported
            // is its peer's "peer missing", not a finding on that peer.
            let gone = dead
                || [p.server, p.client]
                    .iter()
                    .any(|&r| is_silent.get(r as usize) == Some(&true));
            let found = |r: Rank| {
                self.reports[r as usize]
                    .as_ref()
                    .and_then(|rep| {
                        rep.measurements
                            .iter()
                            .find(|m| m.from == from && m.to == to && m.rail == rail)
                    })
                    .cloned()
            };
            let m = if dead {
                None
            } else {
                found(p.client).or_else(|| found(p.server))
            };
            out.push(m.unwrap_or_else(|| Measurement {
                round: self.index,
                from,
                to,
                rail,
                outcome: if gone {
                    Outcome::PeerMissing
                } else {
                    Outcome::Error {
                        error: format!(
                            "no result from rank {} or rank {} within the round's deadline",
                            p.client, p.server
                        ),
                    }
                },
            }));
        }
        (out, silent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::schedule::Pair;

    fn id(rank: Rank, host: &str) -> Identity {
        Identity {
            rail_ports: Vec::new(),
            topology_addr: None,
            rank,
            size: 3,
            version: "0.1.0".into(),
            host: host.into(),
            pair_port: 40000 + rank as u16,
            address: "169.254.10.1".into(),
            device: "rxe0:1".into(),
            rate_gbps: None,
            rails: Vec::new(),
        }
    }

    #[test]
    fn gathering_completes_when_every_rank_has_come() {
        let t0 = Instant::now();
        let mut g = Gathering::new(3, "0.1.0", t0, Duration::from_secs(30));
        for r in [2, 0, 1] {
            assert_eq!(
                g.poll(t0),
                GatheringState::Waiting(t0 + Duration::from_secs(30))
            );
            g.join(id(r, "node")).unwrap();
        }
        assert_eq!(g.poll(t0), GatheringState::Complete);
        let table = g.close();
        assert_eq!(
            table
                .iter()
                .flatten()
                .map(|m| m.pair_port)
                .collect::<Vec<_>>(),
            [40000, 40001, 40002]
        );
    }

    #[test]
    fn gathering_times_out_naming_the_missing_ranks_and_a_late_rank_is_refused() {
        let t0 = Instant::now();
        let mut g = Gathering::new(3, "0.1.0", t0, Duration::from_secs(30));
        g.join(id(1, "b")).unwrap();
        assert_eq!(
            g.poll(t0 + Duration::from_secs(30)),
            GatheringState::TimedOut(vec![0, 2])
        );
        g.close();
        assert_eq!(
            g.join(id(2, "c")).unwrap_err().to_string(),
            "rank 2 on c arrived after the rendezvous ended"
        );
    }

    #[test]
    fn duplicates_versions_sizes_and_ranges_are_refused_by_name() {
        let t0 = Instant::now();
        let mut g = Gathering::new(3, "0.1.0", t0, Duration::from_secs(30));
        g.join(id(1, "a")).unwrap();
        assert_eq!(
            g.join(id(1, "b")).unwrap_err().to_string(),
            "rank 1 arrived twice: from a and from b"
        );
        let mut v = id(2, "c");
        v.version = "0.2.0".into();
        assert_eq!(
            g.join(v).unwrap_err().to_string(),
            "rank 2 on c runs rdmaperf 0.2.0, rank 0 runs 0.1.0: one version on every node"
        );
        let mut s = id(2, "c");
        s.size = 4;
        assert_eq!(
            g.join(s).unwrap_err().to_string(),
            "rank 2 on c says the job has 4 ranks, rank 0 says 3"
        );
        assert_eq!(
            g.join(id(3, "d")).unwrap_err().to_string(),
            "rank 3 on d is out of range: the job has 3 ranks"
        );
        assert!(matches!(
            g.join(id(2, "")),
            Err(JoinError::BadHost { len: 0, .. })
        ));
        assert!(matches!(
            g.join(id(2, &"x".repeat(256))),
            Err(JoinError::BadHost { len: 256, .. })
        ));
        assert!(matches!(
            g.join(id(2, "c\x1b[2J")),
            Err(JoinError::BadHost { len: 5, .. })
        ));
        let mut bad_address = id(2, "c");
        bad_address.address = "10.0.0.1\n".into();
        assert!(matches!(
            g.join(bad_address),
            Err(JoinError::BadHost {
                field: "address",
                len: 9,
                ..
            })
        ));
        let mut no_device = id(2, "c");
        no_device.device = String::new();
        assert!(matches!(
            g.join(no_device),
            Err(JoinError::BadHost {
                field: "device",
                ..
            })
        ));
        let rail = |device: &str| Rail {
            address: None,
            device: device.into(),
            port: 1,
            active: true,
            link_layer: Some("InfiniBand".into()),
            rate_gbps: Some(400.0),
            numa_node: Some(0),
            port_guid: None,
        };
        let mut too_many = id(2, "c");
        too_many.rails = vec![rail("mlx5_0"); MAX_RAILS + 1];
        assert_eq!(
            g.join(too_many).unwrap_err().to_string(),
            "rank 2 sent 33 rails (at most 32)"
        );
        let mut bad_rail = id(2, "c");
        bad_rail.rails = vec![rail("mlx5_0"), rail("mlx5\x1b[2J")];
        assert!(matches!(
            g.join(bad_rail),
            Err(JoinError::BadHost {
                field: "rail device",
                ..
            })
        ));
        assert_eq!(g.missing(), [0, 2]);
    }

    #[test]
    fn a_rank_that_left_before_the_table_may_come_again() {
        let t0 = Instant::now();
        let mut g = Gathering::new(3, "0.1.0", t0, Duration::from_secs(30));
        g.join(id(1, "a")).unwrap();
        g.left(1);
        g.join(id(1, "a")).unwrap();
        assert_eq!(g.missing(), [0, 2]);
    }

    fn round() -> Round {
        Round {
            pairs: vec![
                Pair {
                    server: 0,
                    client: 3,
                },
                Pair {
                    server: 1,
                    client: 2,
                },
            ],
            idle: vec![],
        }
    }

    fn measured(round: u32, from: Rank, to: Rank, gbps: f64) -> Measurement {
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

    #[test]
    fn a_pair_runs_on_the_rails_both_have_and_a_rail_not_reported_is_an_error() {
        let t0 = Instant::now();
        // Ranks 0 and 3 have two rails, rank 1 two, rank 2 one.
        let mut t = RoundTracker::start(0, &round(), &[true; 4], t0, Duration::from_secs(20))
            .with_rails(vec![2, 2, 1, 2]);
        let on = |rail, m: Measurement| Measurement { rail, ..m };
        t.report(RoundReport {
            rank: 3,
            measurements: vec![
                measured(0, 3, 0, 90.0),
                measured(0, 0, 3, 91.0),
                on(1, measured(0, 3, 0, 40.0)),
                // Rail 2 is no rail of theirs: dropped.
                on(2, measured(0, 3, 0, 1.0)),
            ],
        });
        t.report(RoundReport {
            rank: 2,
            measurements: vec![measured(0, 2, 1, 80.0), on(1, measured(0, 2, 1, 1.0))],
        });
        // Ranks 0 and 1 report too, without those figures.
        for rank in [0, 1] {
            t.report(RoundReport {
                rank,
                measurements: vec![],
            });
        }
        let (got, _) = t.finish();
        let seen: Vec<(Rank, Rank, u32, Option<f64>)> =
            got.iter().map(|m| (m.from, m.to, m.rail, m.bw())).collect();
        assert_eq!(
            seen,
            [
                (3, 0, 0, Some(90.0)),
                (0, 3, 0, Some(91.0)),
                (3, 0, 1, Some(40.0)),
                (0, 3, 1, None),
                (2, 1, 0, Some(80.0)),
                (1, 2, 0, None),
            ]
        );
        assert!(matches!(&got[3].outcome, Outcome::Error { error } if error.contains("no result")));
    }

    #[test]
    fn a_round_is_done_when_every_live_rank_reported_and_takes_the_clients_figures() {
        let t0 = Instant::now();
        let mut t = RoundTracker::start(5, &round(), &[true; 4], t0, Duration::from_secs(20));
        assert_eq!(t.owed(), [0, 1, 2, 3]);
        for rank in [0, 1] {
            t.report(RoundReport {
                rank,
                measurements: vec![],
            });
        }
        t.report(RoundReport {
            rank: 3,
            measurements: vec![measured(5, 3, 0, 90.0), measured(5, 0, 3, 91.0)],
        });
        assert_eq!(
            t.poll(t0),
            RoundState::Waiting(t0 + Duration::from_secs(20))
        );
        t.report(RoundReport {
            rank: 2,
            measurements: vec![measured(5, 2, 1, 80.0), measured(5, 1, 2, 81.0)],
        });
        assert_eq!(t.poll(t0), RoundState::Done);
        let (m, silent) = t.finish();
        assert!(silent.is_empty());
        assert_eq!(
            m,
            [
                measured(5, 3, 0, 90.0),
                measured(5, 0, 3, 91.0),
                measured(5, 2, 1, 80.0),
                measured(5, 1, 2, 81.0)
            ]
        );
    }

    #[test]
    fn a_rank_dead_before_or_during_the_round_makes_its_pair_peer_missing() {
        let t0 = Instant::now();
        let mut t = RoundTracker::start(
            0,
            &round(),
            &[true, true, true, false],
            t0,
            Duration::from_secs(20),
        );
        assert_eq!(t.owed(), [0, 1, 2]);
        t.lost(1);
        t.report(RoundReport {
            rank: 0,
            measurements: vec![],
        });
        // Rank 2 reports figures, but its server died during the round.
        t.report(RoundReport {
            rank: 2,
            measurements: vec![measured(0, 2, 1, 80.0), measured(0, 1, 2, 81.0)],
        });
        assert_eq!(t.poll(t0), RoundState::Done);
        let (m, silent) = t.finish();
        assert!(silent.is_empty());
        assert!(m.iter().all(|m| m.outcome == Outcome::PeerMissing), "{m:?}");
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn past_the_deadline_the_silent_ranks_are_named_and_their_unreported_pairs_peer_missing() {
        let t0 = Instant::now();
        let mut t = RoundTracker::start(2, &round(), &[true; 4], t0, Duration::from_secs(20));
        t.report(RoundReport {
            rank: 0,
            measurements: vec![],
        });
        t.report(RoundReport {
            rank: 3,
            measurements: vec![measured(2, 3, 0, 90.0), measured(2, 0, 3, 91.0)],
        });
        assert_eq!(t.poll(t0 + Duration::from_secs(20)), RoundState::Done);
        let (m, silent) = t.finish();
        assert_eq!(silent, [1, 2]);
        // Ranks 1 and 2 leave the run: their pair is not a finding.
        assert_eq!(m[2].outcome, Outcome::PeerMissing);
    }

    #[test]
    fn a_report_cannot_carry_another_pairs_or_another_rounds_figures() {
        let t0 = Instant::now();
        let mut t = RoundTracker::start(1, &round(), &[true; 4], t0, Duration::from_secs(20));
        t.report(RoundReport {
            rank: 3,
            measurements: vec![
                measured(1, 2, 1, 1.0),
                measured(0, 3, 0, 1.0),
                measured(1, 3, 0, 90.0),
            ],
        });
        // A second report from the same rank is ignored.
        t.report(RoundReport {
            rank: 3,
            measurements: vec![measured(1, 0, 3, 5.0)],
        });
        // An idle or unknown rank's report is ignored.
        t.report(RoundReport {
            rank: 9,
            measurements: vec![measured(1, 9, 0, 5.0)],
        });
        let (m, _) = t.finish();
        assert_eq!(m[0], measured(1, 3, 0, 90.0));
        // Nothing else counted; ranks 0, 1 and 2 were silent: peer missing.
        assert!(
            m[1..].iter().all(|m| m.outcome == Outcome::PeerMissing),
            "{m:?}"
        );
    }

    /// Drives every round of all pairs of `size` ranks through a tracker,
    /// each client reporting both directions at `bw(from, to)` Gb/s;
    /// `dies` (rank, round): that rank is lost at the start of that round.
    fn simulate(
        size: u32,
        bw: &dyn Fn(Rank, Rank) -> f64,
        dies: Option<(Rank, u32)>,
    ) -> (Vec<Measurement>, Vec<Rank>) {
        let schedule = crate::cluster::schedule::all_pairs(size).unwrap();
        let mut alive = vec![true; size as usize];
        let now = Instant::now();
        let mut all = Vec::new();
        for (i, round) in schedule.rounds.iter().enumerate() {
            let i = i as u32;
            let mut t = RoundTracker::start(i, round, &alive, now, Duration::from_secs(10));
            if let Some((rank, at)) = dies
                && at == i
            {
                t.lost(rank);
                alive[rank as usize] = false;
            }
            for p in &round.pairs {
                for r in [p.server, p.client] {
                    let measurements = if r == p.client {
                        [(p.client, p.server), (p.server, p.client)]
                            .map(|(from, to)| Measurement {
                                round: i,
                                from,
                                to,
                                rail: 0,
                                outcome: Outcome::Measured {
                                    msg_rate_mpps: None,
                                    bw_gbps: bw(from, to),
                                    lat_us: None,
                                    latency: None,
                                },
                            })
                            .to_vec()
                    } else {
                        Vec::new()
                    };
                    t.report(RoundReport {
                        rank: r,
                        measurements,
                    });
                }
            }
            assert_eq!(t.poll(now), RoundState::Done, "round {i}");
            let (m, silent) = t.finish();
            assert!(silent.is_empty(), "{silent:?}");
            all.extend(m);
        }
        let missing = (0..size).filter(|&r| !alive[r as usize]).collect();
        (all, missing)
    }

    #[test]
    fn a_simulated_run_measures_every_direction_of_every_pair_once() {
        for size in [2, 3, 17, 64] {
            let (all, missing) = simulate(size, &|_, _| 100.0, None);
            let mut seen: Vec<(Rank, Rank)> = all.iter().map(|m| (m.from, m.to)).collect();
            seen.sort_unstable();
            let want: Vec<(Rank, Rank)> = (0..size)
                .flat_map(|a| (0..size).filter(move |&b| b != a).map(move |b| (a, b)))
                .collect();
            assert_eq!(seen, want, "N = {size}");
            let v = crate::cluster::verdict::judge(size, &missing, &all, &Default::default());
            assert_eq!(v.exit_code(), 0, "N = {size}");
        }
    }

    #[test]
    fn a_rank_that_dies_mid_run_is_missing_and_its_later_pairs_peer_missing() {
        // Rank 5 of 16 dies at round 7; rank 9's one-way fault at 50 Gb/s.
        let bw = |from: Rank, _to: Rank| if from == 9 { 50.0 } else { 100.0 };
        let (all, missing) = simulate(16, &bw, Some((5, 7)));
        assert_eq!(missing, [5]);
        let of5: Vec<&Measurement> = all.iter().filter(|m| m.from == 5 || m.to == 5).collect();
        assert_eq!(of5.len(), 30);
        assert!(
            of5.iter()
                .all(|m| (m.round >= 7) == (m.outcome == Outcome::PeerMissing))
        );
        let v = crate::cluster::verdict::judge(16, &missing, &all, &Default::default());
        assert_eq!(v.exit_code(), 4);
        let status = |r: usize| v.nodes[r].status;
        assert_eq!(status(5), crate::cluster::verdict::NodeStatus::Missing);
        assert_eq!(status(9), crate::cluster::verdict::NodeStatus::Fail);
        assert!(
            (0..16)
                .filter(|&r| r != 5 && r != 9)
                .all(|r| status(r) == crate::cluster::verdict::NodeStatus::Pass)
        );
    }
}
