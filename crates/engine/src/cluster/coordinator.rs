//! Rank 0's coordinator as one deterministic state machine, with no I/O
//! and time passed in (quinn-proto's shape, like the pair session): the
//! driver hands it what arrived ([`Coordinator::handle_join`],
//! [`Coordinator::handle`], [`Coordinator::handle_lost`]) and the time,
//! asks what to send ([`Coordinator::poll_transmit`]), what to say
//! ([`Coordinator::poll_note`]) and when to wake
//! ([`Coordinator::poll_timeout`]), and moves the bytes.
//!
//! It owns the whole run: the gathering ([`Gathering`]), the schedule
//! (one round computed at a time: [`Rounds`]), the round in flight
//! ([`RoundTracker`]), the one set of live ranks, the quick mode's
//! retests, each rank's port facts, and the measurements the verdicts
//! judge. Every message it sends is bounded whatever the job's size (a
//! round's message carries the partner's [`Contact`]); rank 0 alone
//! keeps every identity, for the report.
//!
//! Its phases: gathering (until every rank joined or the rendezvous
//! deadline) → the start, sent once to every live rank → the rounds (each
//! until every live rank in it reported or its budget passed) → for
//! `quick`, the retests → done: the driver judges
//! ([`Coordinator::judge`]), writes its report, then ends the ranks
//! ([`Coordinator::end`]). A rank that leaves, stays silent past a round's
//! bound or cannot be written to is dropped from the run, never waited
//! for again.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::localise::LeafLayout;
use super::messages::{ClusterMessage, Contact};
use super::pair_test::PairTest;
use super::rails;
use super::rendezvous::{
    Gathering, GatheringState, Identity, JoinError, RoundReport, RoundState, RoundTracker,
};
use super::report;
use super::schedule::{self, Pattern, Rank, Round, Rounds};
use super::topology::{FabricMap, Format, SlurmAddress, Topology};
use super::verdict::{self, ClusterVerdict, Measurement, NodeFacts, Outcome, Thresholds};
use crate::fabric::link::CounterRise;

/// The schedule rank 0's flags ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleChoice {
    /// `--pattern`.
    Pattern(Pattern),
    /// `--pairs-file`'s text (its host names resolved once every rank
    /// has joined).
    PairsFile(String),
}

/// What the coordinator is built from: rank 0's flags.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The job's size.
    pub size: u32,
    /// rdmaperf's version: every rank must run the same.
    pub version: String,
    /// What every pair runs.
    pub test: PairTest,
    /// How long the gathering waits for every rank.
    pub rendezvous_timeout: Duration,
    /// The schedule.
    pub schedule: ScheduleChoice,
    /// The verdicts' thresholds.
    pub thresholds: Thresholds,
    /// `--ignore-counter`: port error counters not judged (a name, or a
    /// prefix ending in `*`).
    pub ignore_counters: Vec<String>,
    /// `--topology FILE`, read: where the ranks' rails sit. `None`: the
    /// ranks' `SLURM_TOPOLOGY_ADDR`, when they sent one.
    pub topology: Option<Topology>,
}

/// Whom a message goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipient {
    /// One rank.
    Rank(Rank),
    /// Every live rank ([`Coordinator::live`]): the same bytes to all,
    /// encoded once.
    EveryLive,
}

/// A message to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Transmit {
    /// To whom.
    pub to: Recipient,
    /// What.
    pub msg: ClusterMessage,
}

/// What the coordinator has to say, for stdout (the plan, the retest)
/// or stderr (everything else).
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// These ranks did not join within the rendezvous timeout.
    NeverCame(Vec<Rank>),
    /// The plan (stdout).
    Plan(String),
    /// The schedule could not be built (a bad pairs file): the run ends
    /// with exit code 2.
    BadSchedule(String),
    /// A rank left or could not be reached; its pairs are peer missing
    /// from now on.
    Left {
        /// The rank.
        rank: Rank,
        /// The round it left in (`None`: before the first).
        round: Option<u32>,
        /// Why, as the driver saw it.
        why: String,
    },
    /// A rank sent no report within a round's bound: dropped.
    Silent {
        /// The rank.
        rank: Rank,
        /// The round.
        round: u32,
        /// The round's bound.
        bound: Duration,
    },
    /// Where the ranks sit (stdout): the groups of `leaves`, and what the
    /// topology did not match.
    Topology(Vec<String>),
    /// The quick mode's retest (stdout).
    Retest {
        /// Suspect ranks.
        suspects: usize,
        /// Its rounds.
        rounds: u32,
    },
    /// A round ended.
    RoundDone {
        /// `round` or `retest round`.
        label: &'static str,
        /// Its number in its pass, from 1.
        number: u32,
        /// Rounds in its pass.
        of: u32,
        /// Its pairs.
        pairs: usize,
        /// Directions in error or with a peer missing so far.
        unmeasured: usize,
        /// Its wall time.
        took: Duration,
    },
    /// Every round is done: judge, report, then [`Coordinator::end`].
    Done,
}

/// Where the run stands.
#[derive(Debug)]
enum Phase {
    Gathering(Gathering),
    Rounds(Pass),
    Done,
    Ended,
}

/// The rounds of one pass (the schedule, or the retests) and the one in
/// flight.
#[derive(Debug)]
struct Pass {
    label: &'static str,
    rounds: Rounds,
    /// The next round of this pass to start.
    next: u32,
    /// The round in flight: its tracker and when it started.
    current: Option<(RoundTracker, Instant, usize)>,
}

/// Rank 0's coordinator (see the module doc).
#[derive(Debug)]
pub struct Coordinator {
    setup: Setup,
    phase: Phase,
    /// Every rank's identity, once gathered (rank 0 alone keeps them).
    members: Vec<Option<Identity>>,
    /// Where the members' rails sit, when a topology said (read once the
    /// gathering closed).
    fabric: Option<FabricMap>,
    /// The same as the verdicts and the page take it, built once with it.
    layout: Option<LeafLayout>,
    /// The one set of live ranks.
    live: Vec<bool>,
    /// The pattern (`None`: a pairs file).
    pattern: Option<Pattern>,
    /// Rounds run so far (the next round's number on the wire).
    index: u32,
    /// Every direction measured so far, in round order.
    measurements: Vec<Measurement>,
    /// Directions in error or with a peer missing so far.
    unmeasured: usize,
    /// Per rank: the error counters of its ports that rose (its last
    /// report's).
    port_errors: Vec<Vec<CounterRise>>,
    /// Each round's wall time.
    round_times: Vec<Duration>,
    /// When the gathering gives up on the ranks not yet come.
    gather_deadline: Instant,
    plan: String,
    out: VecDeque<Transmit>,
    notes: VecDeque<Note>,
}

impl Coordinator {
    /// A coordinator gathering `setup.size` ranks from `now`.
    pub fn new(setup: Setup, now: Instant) -> Self {
        let size = setup.size as usize;
        Self {
            phase: Phase::Gathering(Gathering::new(
                setup.size,
                &setup.version,
                now,
                setup.rendezvous_timeout,
            )),
            members: Vec::new(),
            fabric: None,
            layout: None,
            live: vec![false; size],
            pattern: None,
            index: 0,
            measurements: Vec::new(),
            unmeasured: 0,
            port_errors: vec![Vec::new(); size],
            round_times: Vec::new(),
            gather_deadline: now + setup.rendezvous_timeout,
            plan: String::new(),
            out: VecDeque::new(),
            notes: VecDeque::new(),
            setup,
        }
    }

    /// A rank's join. `Ok`: it is in the run (the driver now knows the
    /// connection as that rank's). `Err`: refused, for the driver to tell
    /// it ([`refusal`]) and close — a late, duplicate, foreign or
    /// malformed identity never touches the run.
    ///
    /// # Errors
    /// Why it was refused.
    pub fn handle_join(&mut self, identity: Identity, now: Instant) -> Result<(), JoinError> {
        let rank = identity.rank;
        let Phase::Gathering(g) = &mut self.phase else {
            return Err(JoinError::Late {
                rank,
                host: identity.host,
            });
        };
        g.join(identity)?;
        self.live[rank as usize] = true;
        self.advance(now);
        Ok(())
    }

    /// What `rank` sent (a report; anything else is ignored).
    pub fn handle(&mut self, rank: Rank, msg: ClusterMessage, now: Instant) {
        let ClusterMessage::Report {
            round,
            measurements,
            port_errors,
        } = msg
        else {
            return;
        };
        if !self.is_live(rank) {
            return;
        }
        if let Phase::Rounds(Pass {
            current: Some((tracker, ..)),
            ..
        }) = &mut self.phase
            && round == self.index
        {
            if let Some(slot) = self.port_errors.get_mut(rank as usize) {
                *slot = port_errors;
            }
            tracker.report(RoundReport { rank, measurements });
        }
        self.advance(now);
    }

    /// `rank`'s connection closed or failed (`why`), or it could not be
    /// written to: it leaves the run.
    pub fn handle_lost(&mut self, rank: Rank, why: &str, now: Instant) {
        if !self.is_live(rank) {
            return;
        }
        self.live[rank as usize] = false;
        match &mut self.phase {
            // Before the gathering closes it may come back.
            Phase::Gathering(g) => g.left(rank),
            Phase::Rounds(pass) => {
                let round = pass.current.as_mut().map(|(t, ..)| {
                    t.lost(rank);
                    self.index
                });
                self.notes.push_back(Note::Left {
                    rank,
                    round,
                    why: why.to_owned(),
                });
            }
            Phase::Done | Phase::Ended => {}
        }
        self.advance(now);
    }

    /// Time passed: call at [`Coordinator::poll_timeout`].
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
    }

    /// When it next needs [`Coordinator::handle_timeout`] (`None`: only
    /// when something arrives, or never again).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Gathering(_) => Some(self.gather_deadline),
            Phase::Rounds(Pass {
                current: Some((_, started, _)),
                ..
            }) => Some(*started + self.setup.test.round_budget()),
            _ => None,
        }
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next thing to say.
    pub fn poll_note(&mut self) -> Option<Note> {
        self.notes.pop_front()
    }

    /// Whether `rank` is in the run.
    pub fn is_live(&self, rank: Rank) -> bool {
        self.live.get(rank as usize).copied().unwrap_or(false)
    }

    /// The live ranks, in order.
    pub fn live(&self) -> impl Iterator<Item = Rank> + '_ {
        (0..self.setup.size).filter(|&r| self.live[r as usize])
    }

    /// Whether every round is done (judge, report, then end).
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// Whether the run is over (ended, or the gathering found nothing to
    /// run).
    pub fn is_ended(&self) -> bool {
        matches!(self.phase, Phase::Ended)
    }

    /// Every rank's identity (`None`: it never came), once gathered.
    pub fn members(&self) -> &[Option<Identity>] {
        &self.members
    }

    /// Every direction measured so far, in round order.
    pub fn measurements(&self) -> &[Measurement] {
        &self.measurements
    }

    /// The plan line.
    pub fn plan(&self) -> &str {
        &self.plan
    }

    /// Each round's wall time so far.
    pub fn round_times(&self) -> &[Duration] {
        &self.round_times
    }

    /// The ranks not in the run (never came, left, silent).
    pub fn missing(&self) -> Vec<Rank> {
        (0..self.setup.size)
            .filter(|&r| !self.live[r as usize])
            .collect()
    }

    /// The verdicts on every direction measured, with each rank's facts
    /// (its rates, the counters that rose but those ignored, its rails
    /// against most ranks').
    pub fn judge(&self) -> ClusterVerdict {
        self.judge_against(&[])
    }

    /// [`Coordinator::judge`] with each measurement's own past
    /// (`baselines[i]` for [`Coordinator::measurements`]`[i]`; `--history`).
    pub fn judge_against(&self, baselines: &[Option<verdict::BaselineFloor>]) -> ClusterVerdict {
        verdict::judge_with_baselines(
            self.setup.size,
            &self.missing(),
            &self.measurements,
            &self.setup.thresholds,
            &self.node_facts(true),
            self.layout(),
            baselines,
        )
    }

    /// Ends the run: every live rank is told `exit_code` and its own line
    /// (`line_of`); then nothing more is sent.
    pub fn end(&mut self, exit_code: u8, line_of: &dyn Fn(Rank) -> String) {
        for r in self.live().collect::<Vec<_>>() {
            self.out.push_back(Transmit {
                to: Recipient::Rank(r),
                msg: ClusterMessage::End {
                    exit_code,
                    line: line_of(r),
                },
            });
        }
        self.phase = Phase::Ended;
    }

    /// Moves the run on at `now` as far as it goes.
    fn advance(&mut self, now: Instant) {
        loop {
            let moved = match &mut self.phase {
                Phase::Gathering(g) => match g.poll(now) {
                    GatheringState::Waiting(_) => false,
                    GatheringState::Complete | GatheringState::TimedOut(_) => {
                        let members = g.close();
                        self.start(members, now);
                        true
                    }
                },
                Phase::Rounds(pass) => match &pass.current {
                    Some((t, ..)) if t.poll(now) == RoundState::Done => {
                        self.finish_round(now);
                        true
                    }
                    Some(_) => false,
                    None => self.next_round(now),
                },
                Phase::Done | Phase::Ended => false,
            };
            if !moved {
                return;
            }
        }
    }

    /// The gathering closed with `members`: the schedule, the plan, the
    /// start to every live rank, then the first round.
    fn start(&mut self, members: Vec<Option<Identity>>, now: Instant) {
        let size = self.setup.size;
        let never_came: Vec<Rank> = (0..size)
            .filter(|&r| members[r as usize].is_none())
            .collect();
        for &r in &never_came {
            self.live[r as usize] = false;
        }
        if !never_came.is_empty() {
            self.notes.push_back(Note::NeverCame(never_came.clone()));
        }
        self.members = members;
        self.fabric = self.place_members();
        self.layout = self.fabric.as_ref().map(|f| LeafLayout {
            switch_names: f.switches.iter().map(|s| s.name.clone()).collect(),
            leaf_of: f.leaf_of.clone(),
            group_names: f.groups.iter().map(|g| g.name.clone()).collect(),
            group_of: f.group_of.clone(),
        });
        let rounds = match self.build_schedule() {
            Ok(r) => r,
            Err(e) => {
                self.notes.push_back(Note::BadSchedule(e.clone()));
                self.end(2, &|_| format!("rdmaperf cluster: {e}"));
                return;
            }
        };
        let test = &self.setup.test;
        let plan = match self.pattern {
            Some(p) => report::plan_line(p, size, &rounds, test.typical_round_s()),
            None => format!(
                "plan: pairs file of {size} ranks: {} pairs in {} rounds",
                rounds.pair_count(),
                rounds.count()
            ),
        };
        let most_rails = self
            .members
            .iter()
            .flatten()
            .map(Identity::rail_count)
            .max()
            .unwrap_or(1);
        self.plan = if most_rails > 1 {
            format!(
                "{plan}; each pair on the rails both ranks have (up to {most_rails}), all at once"
            )
        } else {
            plan
        };
        self.notes.push_back(Note::Plan(self.plan.clone()));
        // Room for every direction at once (no doubling of a vector of
        // millions at its last growth), up to 16 Mi of them.
        let expected = rounds.pair_count() * 2 * u64::from(most_rails);
        self.measurements
            .reserve(usize::try_from(expected.min(1 << 24)).unwrap_or(0));
        self.out.push_back(Transmit {
            to: Recipient::EveryLive,
            msg: ClusterMessage::Start {
                config: test.clone(),
                present: size - never_came.len() as u32,
                missing: never_came.len() as u32,
            },
        });
        self.phase = Phase::Rounds(Pass {
            label: "round",
            rounds,
            next: 0,
            current: None,
        });
        let _ = now;
    }

    /// Where the members sit: `--topology`'s file, else the ranks'
    /// `SLURM_TOPOLOGY_ADDR` (all that sent one); `None` without either.
    /// What it says of them goes to the notes.
    fn place_members(&mut self) -> Option<FabricMap> {
        let from_slurm;
        let topology = match &self.setup.topology {
            Some(t) => t,
            None => {
                let mut addresses = Vec::new();
                for m in self.members.iter().flatten() {
                    if let Some(a) = &m.topology_addr {
                        match SlurmAddress::parse(&a.addr, &a.pattern) {
                            Ok(parsed) => addresses.push((m.host.as_str(), parsed)),
                            Err(e) => {
                                self.notes.push_back(Note::Topology(vec![format!(
                                    "topology: rank {}'s SLURM_TOPOLOGY_ADDR {:?}: {e}",
                                    m.rank, a.addr
                                )]));
                                return None;
                            }
                        }
                    }
                }
                if addresses.is_empty() {
                    return None;
                }
                match Topology::from_slurm_addresses(addresses.iter().map(|(h, a)| (*h, a))) {
                    Ok(t) => {
                        from_slurm = t;
                        &from_slurm
                    }
                    Err(e) => {
                        self.notes.push_back(Note::Topology(vec![format!(
                            "topology: the ranks' SLURM_TOPOLOGY_ADDR: {e}"
                        )]));
                        return None;
                    }
                }
            }
        };
        let fabric = FabricMap::build(&self.members, topology);
        let mut lines = vec![topology_line(&fabric, topology.format())];
        lines.extend(fabric.notes.iter().map(|n| format!("topology: note: {n}")));
        self.notes.push_back(Note::Topology(lines));
        Some(fabric)
    }

    /// The groups as the schedule takes them (each group's ranks).
    fn groups(&self) -> Option<Vec<Vec<Rank>>> {
        self.fabric.as_ref().map(FabricMap::group_ranks)
    }

    /// Where each rank's rails sit, for the verdicts and the page.
    pub fn layout(&self) -> Option<&LeafLayout> {
        self.layout.as_ref()
    }

    /// The schedule rank 0's flags ask for.
    fn build_schedule(&mut self) -> Result<Rounds, String> {
        let size = self.setup.size;
        let built = match &self.setup.schedule {
            ScheduleChoice::Pattern(p) => {
                self.pattern = Some(*p);
                match p {
                    Pattern::AllPairs => {
                        schedule::check_size(size).map(|()| Rounds::AllPairs { size })
                    }
                    // With groups, each bisection partner across them.
                    Pattern::Quick => match self.groups() {
                        Some(g) if g.len() > 1 => schedule::quick_across(&g).map(Rounds::from),
                        _ => schedule::quick(size).map(Rounds::from),
                    },
                    Pattern::Ring => schedule::ring(size).map(Rounds::from),
                    Pattern::Leaves => match self.groups() {
                        Some(g) => schedule::Leaves::new(&g).map(Rounds::from),
                        None => {
                            return Err("--pattern leaves needs the nodes' leaf switches: \
                                        give --topology FILE (Slurm's topology.conf or an \
                                        ibnetdiscover output), or start the ranks with srun \
                                        under TopologyPlugin=topology/tree"
                                .into());
                        }
                    },
                }
            }
            ScheduleChoice::PairsFile(text) => {
                // A host name names its rank when one rank runs there.
                let members = &self.members;
                let names = |name: &str| -> Option<Rank> {
                    let mut on = members
                        .iter()
                        .enumerate()
                        .filter(|(_, m)| m.as_ref().is_some_and(|m| m.host == name));
                    match (on.next(), on.next()) {
                        (Some((r, _)), None) => Rank::try_from(r).ok(),
                        _ => None,
                    }
                };
                schedule::from_pairs_file(text, &names, size).map(Rounds::from)
            }
        };
        built.map_err(|e| format!("--pairs-file/--pattern: {e}"))
    }

    /// Starts the pass's next round, or the retests, or ends the rounds;
    /// `true` when the phase moved.
    fn next_round(&mut self, now: Instant) -> bool {
        let Phase::Rounds(pass) = &mut self.phase else {
            return false;
        };
        let Some(round) = pass.rounds.round(pass.next) else {
            // The pass is over: the quick mode retests its suspects once.
            if pass.label == "round" && self.pattern == Some(Pattern::Quick) {
                let retest = self.retest_rounds();
                if !retest.is_empty() {
                    let suspects = retest.iter().map(|r| r.pairs.len()).sum();
                    self.notes.push_back(Note::Retest {
                        suspects,
                        rounds: retest.len() as u32,
                    });
                    self.phase = Phase::Rounds(Pass {
                        label: "retest round",
                        rounds: Rounds::Listed(retest),
                        next: 0,
                        current: None,
                    });
                    return true;
                }
            }
            self.phase = Phase::Done;
            self.notes.push_back(Note::Done);
            return true;
        };
        pass.next += 1;
        let pairs = round.pairs.len();
        let live = &self.live;
        let alive = |r: Rank| live.get(r as usize).copied().unwrap_or(false);
        let rdma_cm = self.setup.test.rdma_cm;
        let mut partnered = vec![false; live.len()];
        for p in &round.pairs {
            // A pair whose partner is gone: the survivor sits it out (its
            // directions are peer missing).
            if !(alive(p.server) && alive(p.client)) {
                continue;
            }
            for (me, other, serve) in [(p.server, p.client, true), (p.client, p.server, false)] {
                let contact = self.members[other as usize]
                    .as_ref()
                    .map(|id| Contact::of(id, rdma_cm));
                partnered[me as usize] = true;
                self.out.push_back(Transmit {
                    to: Recipient::Rank(me),
                    msg: ClusterMessage::Round {
                        round: self.index,
                        partner: contact,
                        serve,
                    },
                });
            }
        }
        for r in 0..self.setup.size {
            if alive(r) && !partnered[r as usize] {
                self.out.push_back(Transmit {
                    to: Recipient::Rank(r),
                    msg: ClusterMessage::Round {
                        round: self.index,
                        partner: None,
                        serve: false,
                    },
                });
            }
        }
        let rails: Vec<u32> = self
            .members
            .iter()
            .map(|m| m.as_ref().map_or(1, Identity::rail_count))
            .collect();
        let tracker = RoundTracker::start(
            self.index,
            &round,
            &self.live,
            now,
            self.setup.test.round_budget(),
        )
        .with_rails(rails);
        let Phase::Rounds(pass) = &mut self.phase else {
            return false;
        };
        pass.current = Some((tracker, now, pairs));
        true
    }

    /// The round in flight is over: its measurements kept, its silent
    /// ranks dropped.
    fn finish_round(&mut self, now: Instant) {
        let Phase::Rounds(pass) = &mut self.phase else {
            return;
        };
        let Some((tracker, started, pairs)) = pass.current.take() else {
            return;
        };
        let (got, silent) = tracker.finish();
        let bound = self.setup.test.round_budget();
        for r in silent {
            self.live[r as usize] = false;
            self.notes.push_back(Note::Silent {
                rank: r,
                round: self.index,
                bound,
            });
        }
        self.unmeasured += got
            .iter()
            .filter(|m| !matches!(m.outcome, Outcome::Measured { .. }))
            .count();
        self.measurements.extend(got);
        let took = now.saturating_duration_since(started);
        self.round_times.push(took);
        self.notes.push_back(Note::RoundDone {
            label: pass.label,
            number: pass.next,
            of: pass.rounds.count(),
            pairs,
            unmeasured: self.unmeasured,
            took,
        });
        self.index += 1;
    }

    /// The quick mode's retest: each suspect of the first verdict meets a
    /// known-good rank it has not met.
    fn retest_rounds(&self) -> Vec<Round> {
        let size = self.setup.size;
        // The retest is about figures: port errors are judged at the end.
        let first = verdict::judge_with(
            size,
            &self.missing(),
            &self.measurements,
            &self.setup.thresholds,
            &self.node_facts(false),
        );
        let (suspects, good) = verdict::retest_candidates(size, &self.measurements, &first);
        let suspects: Vec<Rank> = suspects.into_iter().filter(|&r| self.is_live(r)).collect();
        let good: Vec<Rank> = good.into_iter().filter(|&r| self.is_live(r)).collect();
        let measured = &self.measurements;
        let met = |a: Rank, b: Rank| {
            measured
                .iter()
                .any(|m| (m.from == a && m.to == b) || (m.from == b && m.to == a))
        };
        schedule::retest(size, &suspects, &good, &met)
    }

    /// Each rank's [`NodeFacts`]: its ports' rates, and (`with_ports`)
    /// the error counters that rose but those `--ignore-counter` names,
    /// and its rails against most ranks'.
    fn node_facts(&self, with_ports: bool) -> Vec<NodeFacts> {
        let ignore = &self.setup.ignore_counters;
        let ignored = |name: &str| {
            // A rail's counter is named after its port: `mlx5_1:1 counters/...`.
            let name = name.rsplit(' ').next().unwrap_or(name);
            ignore.iter().any(|i| match i.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == i,
            })
        };
        let rail_findings = if with_ports {
            rails::findings(
                &self
                    .members
                    .iter()
                    .map(|m| m.as_ref().map(|m| m.rails.clone()).unwrap_or_default())
                    .collect::<Vec<_>>(),
            )
        } else {
            Vec::new()
        };
        self.members
            .iter()
            .enumerate()
            .map(|(r, m)| NodeFacts {
                rate_gbps: m.as_ref().and_then(|m| m.rate_gbps),
                rail_rates_gbps: m
                    .as_ref()
                    .map(|m| m.rails.iter().map(|r| r.rate_gbps).collect())
                    .unwrap_or_default(),
                port_errors: if with_ports {
                    self.port_errors
                        .get(r)
                        .map(|e| e.iter().filter(|c| !ignored(&c.name)).cloned().collect())
                        .unwrap_or_default()
                } else {
                    Vec::new()
                },
                rail_findings: rail_findings.get(r).cloned().unwrap_or_default(),
            })
            .collect()
    }
}

/// What a refused rank is told before its connection is closed: the
/// reason, and exit code 4 (it is not in the run: rank 0 names it
/// missing, whatever kept it out).
pub fn refusal(e: &JoinError) -> ClusterMessage {
    ClusterMessage::End {
        exit_code: verdict::EXIT_RANKS_MISSING,
        line: format!("rank 0 refused this rank: {e}"),
    }
}

/// The topology's line on stdout: its source and the groups.
fn topology_line(fabric: &FabricMap, format: Format) -> String {
    let source = match format {
        Format::SlurmTopologyConf => "topology.conf",
        Format::Ibnetdiscover => "ibnetdiscover",
        Format::SlurmAddresses => "SLURM_TOPOLOGY_ADDR",
    };
    let mut names: Vec<String> = fabric
        .groups
        .iter()
        .take(8)
        .map(|g| format!("{} ({})", g.name, g.ranks.len()))
        .collect();
    if fabric.groups.len() > 8 {
        names.push(format!("and {} more", fabric.groups.len() - 8));
    }
    let groups = fabric.groups.len();
    format!(
        "topology: from {source}: {} switches, {groups} group{}: {}",
        fabric.switches.len(),
        if groups == 1 { "" } else { "s" },
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::cluster::rails::Rail;
    use crate::cluster::verdict::NodeStatus;

    fn identity(rank: Rank, size: u32, rails: u32) -> Identity {
        Identity {
            rank,
            size,
            version: "test".into(),
            host: format!("node-{rank}"),
            pair_port: 40_000,
            address: format!("169.254.{}.{}", rank / 250, rank % 250 + 1),
            device: "mlx5_0:1".into(),
            rate_gbps: Some(400.0),
            rails: (0..rails)
                .map(|k| Rail {
                    address: None,
                    device: format!("mlx5_{k}"),
                    port: 1,
                    active: true,
                    link_layer: Some("InfiniBand".into()),
                    rate_gbps: Some(400.0),
                    numa_node: None,
                    port_guid: None,
                })
                .collect(),
            rail_ports: (1..rails).map(|k| 40_000 + k as u16).collect(),
            topology_addr: None,
        }
    }

    fn setup(size: u32, schedule: ScheduleChoice) -> Setup {
        Setup {
            size,
            version: "test".into(),
            test: PairTest {
                size: 65_536,
                duration_s: 2,
                qps: 1,
                rdma_cm: false,
                timeout_s: 10,
                latency: false,
                lat_iters: 1_000,
                percentile: "median".into(),
                simulate: true,
                simulate_ms: 0,
            },
            rendezvous_timeout: Duration::from_secs(60),
            schedule,
            thresholds: Thresholds::default(),
            ignore_counters: Vec::new(),
            topology: None,
        }
    }

    /// How a simulated rank behaves.
    #[derive(Clone, Copy, PartialEq)]
    enum Kind {
        Healthy,
        /// Every direction it takes part in on this rail is slow.
        SlowRail(u32),
        /// Never reports (stops reading and writing).
        Mute,
        /// Closes its connection in this round.
        DiesIn(u32),
    }

    /// Every message sent, for the tests' checks.
    #[derive(Default)]
    struct Wire {
        starts: usize,
        rounds: Vec<(Rank, ClusterMessage)>,
        ends: Vec<(Rank, u8)>,
        notes: Vec<Note>,
        biggest_round_message: usize,
    }

    /// Plays every rank against `c` on a virtual clock until the rounds
    /// are done (or, with `judge`, ended).
    fn play(c: &mut Coordinator, now: &mut Instant, kinds: &[Kind], wire: &mut Wire) {
        let rails_of = |r: Rank| -> u32 {
            c.members()
                .get(r as usize)
                .and_then(|m| m.as_ref())
                .map_or(1, Identity::rail_count)
        };
        let _ = rails_of;
        for _ in 0..100_000 {
            let mut replies = Vec::new();
            while let Some(t) = c.poll_transmit() {
                match (t.to, t.msg) {
                    (Recipient::EveryLive, ClusterMessage::Start { .. }) => wire.starts += 1,
                    (Recipient::Rank(r), msg @ ClusterMessage::Round { .. }) => {
                        let len = crate::proto::wire::encode(&msg).unwrap().len();
                        wire.biggest_round_message = wire.biggest_round_message.max(len);
                        let ClusterMessage::Round { round, partner, .. } = &msg else {
                            unreachable!()
                        };
                        let kind = kinds[r as usize];
                        match kind {
                            Kind::Mute => {}
                            Kind::DiesIn(k) if *round >= k => replies.push((r, None)),
                            _ => {
                                let measurements = partner
                                    .as_ref()
                                    .map(|p| {
                                        let mine =
                                            c.members()[r as usize].as_ref().unwrap().rail_count();
                                        (0..mine.min(p.rail_count()))
                                            .map(|rail| {
                                                let slow = [r, p.rank].iter().any(|&x| {
                                                    kinds[x as usize] == Kind::SlowRail(rail)
                                                });
                                                Measurement {
                                                    round: *round,
                                                    from: r,
                                                    to: p.rank,
                                                    rail,
                                                    outcome: Outcome::Measured {
                                                        bw_gbps: if slow { 150.0 } else { 380.0 },
                                                        msg_rate_mpps: None,
                                                        lat_us: None,
                                                        latency: None,
                                                    },
                                                }
                                            })
                                            .collect()
                                    })
                                    .unwrap_or_default();
                                replies.push((
                                    r,
                                    Some(ClusterMessage::Report {
                                        round: *round,
                                        measurements,
                                        port_errors: Vec::new(),
                                    }),
                                ));
                            }
                        }
                        wire.rounds.push((r, msg));
                    }
                    (Recipient::Rank(r), ClusterMessage::End { exit_code, .. }) => {
                        wire.ends.push((r, exit_code));
                    }
                    (to, msg) => panic!("unexpected {to:?} {msg:?}"),
                }
            }
            while let Some(n) = c.poll_note() {
                wire.notes.push(n);
            }
            if c.is_done() || c.is_ended() {
                return;
            }
            if replies.is_empty() {
                // Nothing to say: time passes to the machine's deadline.
                *now = c.poll_timeout().expect("a deadline while waiting");
                c.handle_timeout(*now);
            } else {
                *now += Duration::from_millis(1);
                for (r, reply) in replies {
                    match reply {
                        Some(msg) => c.handle(r, msg, *now),
                        None => c.handle_lost(r, "connection reset", *now),
                    }
                }
            }
        }
        panic!("the run did not end");
    }

    fn gathered(size: u32, rails: u32, schedule: ScheduleChoice) -> (Coordinator, Instant) {
        let start = Instant::now();
        let mut c = Coordinator::new(setup(size, schedule), start);
        // Out of order: odd ranks first, then even, backwards.
        let order = (0..size)
            .filter(|r| r % 2 == 1)
            .chain((0..size).rev().filter(|r| r % 2 == 0));
        for r in order {
            c.handle_join(identity(r, size, rails), start).unwrap();
        }
        (c, start)
    }

    #[test]
    fn all_pairs_meets_every_pair_once_on_every_rail_with_messages_of_one_size() {
        let (size, rails) = (64, 3);
        let (mut c, mut now) = gathered(size, rails, ScheduleChoice::Pattern(Pattern::AllPairs));
        let mut wire = Wire::default();
        play(
            &mut c,
            &mut now,
            &vec![Kind::Healthy; size as usize],
            &mut wire,
        );
        assert!(c.is_done());
        assert_eq!(wire.starts, 1);
        let mut seen = HashSet::new();
        for m in c.measurements() {
            assert!(matches!(m.outcome, Outcome::Measured { .. }), "{m:?}");
            assert!(seen.insert((m.from, m.to, m.rail)), "twice: {m:?}");
        }
        assert_eq!(seen.len(), (size * (size - 1) * rails) as usize);
        // Each round's message is O(1): the partner's contact only.
        assert!(
            wire.biggest_round_message < 200,
            "{}",
            wire.biggest_round_message
        );
        let v = c.judge();
        assert!(
            v.pass(),
            "{:?}",
            v.nodes.iter().find(|n| n.status != NodeStatus::Pass)
        );
        c.end(v.exit_code(), &|r| format!("rank {r}: PASS"));
        assert_eq!(c.poll_transmit().map(|t| t.to), Some(Recipient::Rank(0)));
        assert!(c.is_ended());
    }

    #[test]
    fn refused_joins_never_touch_the_run() {
        let start = Instant::now();
        let mut c = Coordinator::new(setup(4, ScheduleChoice::Pattern(Pattern::Ring)), start);
        c.handle_join(identity(2, 4, 1), start).unwrap();
        // The same rank again, a wrong size, a wrong version, a rank out of range.
        assert!(matches!(
            c.handle_join(identity(2, 4, 1), start),
            Err(JoinError::DuplicateRank { rank: 2, .. })
        ));
        assert!(matches!(
            c.handle_join(identity(1, 5, 1), start),
            Err(JoinError::SizeMismatch { .. })
        ));
        let mut foreign = identity(1, 4, 1);
        foreign.version = "other".into();
        assert!(matches!(
            refusal(&c.handle_join(foreign, start).unwrap_err()),
            ClusterMessage::End { exit_code: 4, line } if line.contains("runs rdmaperf other")
        ));
        assert!(matches!(
            c.handle_join(identity(9, 4, 1), start),
            Err(JoinError::RankOutOfRange { .. })
        ));
        assert_eq!(c.live().collect::<Vec<_>>(), vec![2]);
        for r in [0, 1, 3] {
            c.handle_join(identity(r, 4, 1), start).unwrap();
        }
        // All came: the start goes out at once, then the first round.
        assert_eq!(c.poll_transmit().map(|t| t.to), Some(Recipient::EveryLive));
        // After the gathering: too late, exit 4.
        let late = c.handle_join(identity(3, 4, 1), start).unwrap_err();
        assert!(matches!(late, JoinError::Late { rank: 3, .. }));
        assert!(matches!(
            refusal(&late),
            ClusterMessage::End { exit_code: 4, .. }
        ));
    }

    #[test]
    fn the_gathering_ends_at_its_deadline_and_names_who_never_came() {
        let start = Instant::now();
        let mut c = Coordinator::new(setup(6, ScheduleChoice::Pattern(Pattern::AllPairs)), start);
        for r in [0, 1, 2, 4] {
            c.handle_join(identity(r, 6, 1), start).unwrap();
        }
        // Rank 4 leaves during the gathering and does not come back.
        c.handle_lost(4, "reset", start);
        assert_eq!(c.poll_timeout(), Some(start + Duration::from_secs(60)));
        assert!(c.poll_transmit().is_none());
        let mut now = start + Duration::from_secs(60);
        c.handle_timeout(now);
        let mut wire = Wire::default();
        play(&mut c, &mut now, &[Kind::Healthy; 6], &mut wire);
        assert_eq!(wire.notes[0], Note::NeverCame(vec![3, 4, 5]));
        assert_eq!(c.missing(), vec![3, 4, 5]);
        // Pairs with a missing rank are peer missing; the rest measured.
        let missing = c
            .measurements()
            .iter()
            .filter(|m| m.outcome == Outcome::PeerMissing)
            .count();
        assert_eq!(missing, 2 * (3 * 3 + 3));
        // No round message names a missing partner.
        assert!(wire.rounds.iter().all(|(_, m)| !matches!(
            m,
            ClusterMessage::Round { partner: Some(p), .. } if p.rank >= 3
        )));
        let v = c.judge();
        assert_eq!(v.exit_code(), verdict::EXIT_RANKS_MISSING);
    }

    #[test]
    fn a_rank_that_dies_in_any_round_is_named_and_its_pairs_are_peer_missing() {
        for dies_in in 0..5 {
            let (mut c, mut now) = gathered(6, 1, ScheduleChoice::Pattern(Pattern::AllPairs));
            let mut kinds = vec![Kind::Healthy; 6];
            kinds[3] = Kind::DiesIn(dies_in);
            let mut wire = Wire::default();
            play(&mut c, &mut now, &kinds, &mut wire);
            assert!(c.is_done());
            assert!(
                wire.notes.iter().any(|n| matches!(
                    n,
                    Note::Left { rank: 3, round: Some(r), .. } if *r == dies_in
                )),
                "{:?}",
                wire.notes
            );
            assert_eq!(c.missing(), vec![3]);
            // Every pair of rank 3 from its death on is peer missing.
            for m in c.measurements() {
                let with_3 = m.from == 3 || m.to == 3;
                assert_eq!(
                    m.outcome == Outcome::PeerMissing,
                    with_3 && m.round >= dies_in,
                    "{m:?}"
                );
            }
            // No round after its death was sent to it.
            assert!(wire.rounds.iter().all(|(r, m)| *r != 3
                || matches!(m, ClusterMessage::Round { round, .. } if *round <= dies_in)));
        }
    }

    #[test]
    fn a_mute_rank_holds_a_round_no_longer_than_its_bound_and_is_dropped() {
        let (mut c, mut now) = gathered(8, 1, ScheduleChoice::Pattern(Pattern::AllPairs));
        let started = now;
        let mut kinds = vec![Kind::Healthy; 8];
        kinds[5] = Kind::Mute;
        let mut wire = Wire::default();
        play(&mut c, &mut now, &kinds, &mut wire);
        let bound = setup(8, ScheduleChoice::Pattern(Pattern::AllPairs))
            .test
            .round_budget();
        assert!(wire.notes.contains(&Note::Silent {
            rank: 5,
            round: 0,
            bound
        }));
        // One round waited out its bound; the six after it did not wait.
        assert!(
            now - started < bound + Duration::from_secs(1),
            "{:?}",
            now - started
        );
        assert_eq!(c.missing(), vec![5]);
        // Round 0: its partner's direction measured, its own (nobody
        // reported it) peer missing, as every later one: the silent rank
        // is the finding, not a link of its partner's.
        for m in c.measurements().iter().filter(|m| m.from == 5 || m.to == 5) {
            match (m.round, m.to == 5) {
                (0, true) => assert!(matches!(m.outcome, Outcome::Measured { .. })),
                _ => assert_eq!(m.outcome, Outcome::PeerMissing, "{m:?}"),
            }
        }
        let v = c.judge();
        assert!(
            v.nodes
                .iter()
                .all(|n| n.rank == 5 || n.status == NodeStatus::Pass),
            "{:?}",
            v.nodes
                .iter()
                .find(|n| n.rank != 5 && n.status != NodeStatus::Pass)
        );
    }

    #[test]
    fn quick_at_4096_ranks_on_8_rails_names_the_slow_rail_after_its_retest() {
        let (size, rails) = (4_096, 8);
        let (mut c, mut now) = gathered(size, rails, ScheduleChoice::Pattern(Pattern::Quick));
        let mut kinds = vec![Kind::Healthy; size as usize];
        kinds[1_234] = Kind::SlowRail(5);
        let mut wire = Wire::default();
        play(&mut c, &mut now, &kinds, &mut wire);
        assert!(c.is_done());
        assert!(wire.notes.contains(&Note::Retest {
            suspects: 2,
            rounds: 1
        }));
        let v = c.judge();
        let bad: Vec<_> = v
            .nodes
            .iter()
            .filter(|n| n.status != NodeStatus::Pass)
            .collect();
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].rank, 1_234);
        let failed_rails: Vec<u32> = bad[0]
            .rails
            .iter()
            .filter(|r| r.status != NodeStatus::Pass)
            .map(|r| r.rail)
            .collect();
        assert_eq!(failed_rails, vec![5]);
        // Per round, each live rank was sent one message.
        assert_eq!(wire.rounds.len(), size as usize * 2);
    }

    #[test]
    fn a_bad_pairs_file_ends_every_rank_with_exit_code_2() {
        let (mut c, _) = gathered(3, 1, ScheduleChoice::PairsFile("0 0 nosuchhost\n".into()));
        let mut ends = Vec::new();
        while let Some(t) = c.poll_transmit() {
            if let ClusterMessage::End { exit_code, .. } = t.msg {
                ends.push(exit_code);
            }
        }
        assert_eq!(ends, vec![2, 2, 2]);
        assert!(c.is_ended());
        assert!(matches!(c.poll_note(), Some(Note::BadSchedule(e)) if e.contains("line 1")));
    }
}
