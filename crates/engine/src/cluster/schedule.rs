//! The rounds of pair tests: who meets whom, when, and who serves.
//!
//! - [`all_pairs`]: the circle method, every pair exactly once; odd N
//!   gets a phantom rank whose partner sits the round out, so no rank is
//!   ever in two pairs at once.
//! - [`quick`]: one bisection round (i ↔ i + N/2); [`retest`] pairs its
//!   suspects with known-good ranks, so a verdict can say node or link.
//! - [`ring`]: every i ↔ i + 1 as disjoint pairs in 2 rounds (3 for odd N).
//! - [`from_pairs_file`]: ClusterKit's custom format, `ROUND A B` lines.
//!
//! The rules and their arithmetic: the reference notes' fleet.md §5.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use thiserror::Error;

/// A rank in the job: 0 ..= size − 1.
pub type Rank = u32;

/// Most ranks a schedule is built for (one per node of a 65,536-node
/// fabric; all pairs of that are 2.1 × 10⁹ pairs, so callers cap lower).
pub const MAX_RANKS: u32 = 65_536;
/// Most lines a pairs file may hold.
pub const MAX_PAIRS_FILE_LINES: usize = 1 << 22;
/// Most rounds × ranks a pairs file may expand to: every round lists its
/// idle ranks, so 4 Mi one-pair rounds of 65,536 ranks would be 2.7 × 10¹¹
/// idle entries. 64 Mi slots (256 MiB of idle lists) holds every pairs
/// file of all pairs that fits [`MAX_PAIRS_FILE_LINES`] (N ≤ 2,896).
pub const MAX_PAIRS_FILE_SLOTS: u64 = 1 << 26;

/// Two ranks that test their link in one round. The server listens; the
/// client connects and drives the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Pair {
    /// The rank that serves (listens).
    pub server: Rank,
    /// The rank that connects.
    pub client: Rank,
}

impl Pair {
    /// The other rank of the pair, if `rank` is in it.
    pub fn other(&self, rank: Rank) -> Option<Rank> {
        match rank {
            r if r == self.server => Some(self.client),
            r if r == self.client => Some(self.server),
            _ => None,
        }
    }

    /// The pair's ranks, lower first.
    pub fn ranks(&self) -> (Rank, Rank) {
        (self.server.min(self.client), self.server.max(self.client))
    }
}

/// One round: disjoint pairs tested at the same time, and the ranks that
/// sit it out.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Round {
    /// The pairs, no rank in two.
    pub pairs: Vec<Pair>,
    /// Ranks with no partner this round (odd N's bye).
    pub idle: Vec<Rank>,
}

impl Round {
    /// A round of `pairs` among `size` ranks: the pairs sorted by their
    /// lower rank, every rank in none of them idle.
    fn of(size: u32, mut pairs: Vec<Pair>) -> Self {
        pairs.sort_unstable_by_key(Pair::ranks);
        let mut busy = vec![false; size as usize];
        for p in &pairs {
            busy[p.server as usize] = true;
            busy[p.client as usize] = true;
        }
        let idle = (0..size).filter(|&r| !busy[r as usize]).collect();
        Self { pairs, idle }
    }
}

/// A whole schedule: its rounds in order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Schedule {
    /// The rounds, run one after another.
    pub rounds: Vec<Round>,
}

impl Schedule {
    /// Pairs in all rounds.
    pub fn pair_count(&self) -> usize {
        self.rounds.iter().map(|r| r.pairs.len()).sum()
    }

    /// `rank`'s partner and role in round `round`, if it has one.
    pub fn partner(&self, round: usize, rank: Rank) -> Option<Rank> {
        self.rounds
            .get(round)?
            .pairs
            .iter()
            .find_map(|p| p.other(rank))
    }

    /// The rounds' estimated time at `per_round_s` seconds a round.
    pub fn estimate_seconds(&self, per_round_s: f64) -> f64 {
        self.rounds.len() as f64 * per_round_s
    }

    /// Checks the schedule against `size` ranks: every rank in range, none
    /// paired with itself, none twice in a round, and each round's idle
    /// list exactly the ranks in none of its pairs.
    ///
    /// # Errors
    /// A size above [`MAX_RANKS`]; else the first rule broken, naming the
    /// round and rank.
    pub fn check(&self, size: u32) -> Result<(), ScheduleError> {
        if size > MAX_RANKS {
            return Err(ScheduleError::Size(size));
        }
        for (i, round) in self.rounds.iter().enumerate() {
            let mut seen = vec![false; size as usize];
            for p in &round.pairs {
                for r in [p.server, p.client] {
                    if r >= size {
                        return Err(ScheduleError::RankOutOfRange { rank: r, size });
                    }
                }
                if p.server == p.client {
                    return Err(ScheduleError::SelfPair {
                        round: i,
                        rank: p.server,
                    });
                }
                for r in [p.server, p.client] {
                    if std::mem::replace(&mut seen[r as usize], true) {
                        return Err(ScheduleError::TwiceInRound { round: i, rank: r });
                    }
                }
            }
            let idle: Vec<Rank> = (0..size).filter(|&r| !seen[r as usize]).collect();
            if idle != round.idle {
                return Err(ScheduleError::IdleMismatch { round: i });
            }
        }
        Ok(())
    }

    /// `rank`'s pairs, with their round numbers, in order.
    pub fn pairs_of(&self, rank: Rank) -> Vec<(usize, Pair)> {
        self.rounds
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.pairs
                    .iter()
                    .find(|p| p.other(rank).is_some())
                    .map(|p| (i, *p))
            })
            .collect()
    }
}

/// Which schedule `--pattern` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Every pair once (the circle method).
    AllPairs,
    /// One bisection round, then retests of its suspects.
    Quick,
    /// Every i ↔ i + 1.
    Ring,
}

impl FromStr for Pattern {
    type Err = ScheduleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all-pairs" => Ok(Self::AllPairs),
            "quick" => Ok(Self::Quick),
            "ring" => Ok(Self::Ring),
            _ => Err(ScheduleError::UnknownPattern(s.into())),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AllPairs => "all-pairs",
            Self::Quick => "quick",
            Self::Ring => "ring",
        })
    }
}

/// Why a schedule could not be built or read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScheduleError {
    /// A size of 0 or above [`MAX_RANKS`].
    #[error("a job of {0} ranks: 1 to {MAX_RANKS}")]
    Size(u32),
    /// `--pattern` got a word it does not know.
    #[error("--pattern {0:?}: one of all-pairs, quick, ring")]
    UnknownPattern(String),
    /// A rank at or above the job's size.
    #[error("rank {rank} is out of range: the job has {size} ranks")]
    RankOutOfRange {
        /// The rank.
        rank: Rank,
        /// The job's size.
        size: u32,
    },
    /// A rank paired with itself.
    #[error("round {round} pairs rank {rank} with itself")]
    SelfPair {
        /// The round.
        round: usize,
        /// The rank.
        rank: Rank,
    },
    /// A rank in two pairs of one round.
    #[error("round {round} has rank {rank} in two pairs")]
    TwiceInRound {
        /// The round.
        round: usize,
        /// The rank.
        rank: Rank,
    },
    /// A round's idle list is not the ranks left out of its pairs.
    #[error("round {round}'s idle ranks are not the ranks without a pair")]
    IdleMismatch {
        /// The round.
        round: usize,
    },
    /// A line of a pairs file is wrong.
    #[error("pairs file line {line}: {why}")]
    PairsFile {
        /// Its number, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// The pairs file is longer than [`MAX_PAIRS_FILE_LINES`].
    #[error("pairs file has more than {MAX_PAIRS_FILE_LINES} lines")]
    PairsFileTooLong,
    /// The pairs file's rounds × ranks exceed [`MAX_PAIRS_FILE_SLOTS`].
    #[error(
        "pairs file has {rounds} rounds of {size} ranks: more than {MAX_PAIRS_FILE_SLOTS} rank slots"
    )]
    PairsFileTooBig {
        /// Its distinct round numbers.
        rounds: usize,
        /// The job's size.
        size: u32,
    },
}

/// A job size a schedule can be built for: 1 to [`MAX_RANKS`].
///
/// # Errors
/// [`ScheduleError::Size`].
pub fn check_size(size: u32) -> Result<(), ScheduleError> {
    if size == 0 || size > MAX_RANKS {
        return Err(ScheduleError::Size(size));
    }
    Ok(())
}

/// Rank `i`'s partner in round `round` of the circle method on an even
/// `m` ranks (fleet.md §5): rank m − 1 stays put; its partner is the
/// round's number, and every other i meets (2·round − i) mod (m − 1).
/// Meant for even m ≥ 2, round < m − 1 and i < m; other inputs give a
/// meaningless rank but never panic (m < 2: i itself).
pub fn circle_partner(m: u32, round: u32, i: Rank) -> Rank {
    if m < 2 {
        return i;
    }
    let n = u64::from(m - 1);
    if i == m - 1 {
        round
    } else if i == round {
        m - 1
    } else {
        // (2r − i) mod (m − 1), kept non-negative.
        ((2 * u64::from(round) + n - u64::from(i)) % n) as Rank
    }
}

/// Whether `i` serves against `p` in `round` of the circle method on `m`
/// ranks (fleet.md §5, exact): rank m − 1 serves in even rounds; any other
/// i serves iff (p − i) mod (m − 1) ≤ (m − 2)/2. Every rank serves ⌊k/2⌋
/// or ⌈k/2⌉ of its k pairs.
fn circle_serves(m: u32, round: u32, i: Rank, p: Rank) -> bool {
    if i == m - 1 {
        round.is_multiple_of(2)
    } else if p == m - 1 {
        round % 2 == 1
    } else {
        let n = u64::from(m - 1);
        (u64::from(p) + n - u64::from(i)) % n <= u64::from(m - 2) / 2
    }
}

/// Every pair of `size` ranks exactly once: N − 1 rounds of N/2 pairs for
/// even N; N rounds of (N − 1)/2 for odd N, each rank idle in one. The
/// whole schedule in memory: a run takes its rounds one at a time from
/// [`Rounds::AllPairs`] instead.
///
/// # Errors
/// A size of 0 or above [`MAX_RANKS`].
pub fn all_pairs(size: u32) -> Result<Schedule, ScheduleError> {
    check_size(size)?;
    Ok(Schedule {
        rounds: (0..all_pairs_rounds(size))
            .map(|r| all_pairs_round(size, r))
            .collect(),
    })
}

/// How many rounds all pairs of `size` ranks take: N − 1 for even N, N
/// for odd N (0 for one rank).
pub fn all_pairs_rounds(size: u32) -> u32 {
    if size < 2 { 0 } else { size + size % 2 - 1 }
}

/// Round `r` of all pairs of `size` ranks by the circle method, computed
/// on its own (O(N), each rank's partner O(1)): the same round
/// [`all_pairs`] lists at `r`. A round past the last is empty.
pub fn all_pairs_round(size: u32, r: u32) -> Round {
    let size = size.min(MAX_RANKS);
    if r >= all_pairs_rounds(size) {
        return Round::of(size, Vec::new());
    }
    let m = size + size % 2;
    let pairs = (0..m)
        .filter_map(|i| {
            let p = circle_partner(m, r, i);
            // Each pair once, from its server; none with the phantom.
            (p < size && i < size && circle_serves(m, r, i, p)).then_some(Pair {
                server: i,
                client: p,
            })
        })
        .collect();
    Round::of(size, pairs)
}

/// The rounds of a run, each taken when it is due: all pairs computed
/// round by round (never the whole schedule in memory: 16,384 ranks
/// would be a gigabyte of pairs), or a short list (quick, ring, a pairs
/// file, the retests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rounds {
    /// [`all_pairs_round`] of this many ranks.
    AllPairs {
        /// The job's size.
        size: u32,
    },
    /// These rounds, in order.
    Listed(Vec<Round>),
}

impl Rounds {
    /// How many rounds.
    pub fn count(&self) -> u32 {
        match self {
            Self::AllPairs { size } => all_pairs_rounds(*size),
            Self::Listed(r) => u32::try_from(r.len()).unwrap_or(u32::MAX),
        }
    }

    /// Round `k`, if there is one.
    pub fn round(&self, k: u32) -> Option<Round> {
        match self {
            Self::AllPairs { size } => {
                (k < all_pairs_rounds(*size)).then(|| all_pairs_round(*size, k))
            }
            Self::Listed(r) => r.get(k as usize).cloned(),
        }
    }

    /// Pairs in all rounds.
    pub fn pair_count(&self) -> u64 {
        match self {
            Self::AllPairs { size } => u64::from(*size) * u64::from(size.saturating_sub(1)) / 2,
            Self::Listed(r) => r.iter().map(|r| r.pairs.len() as u64).sum(),
        }
    }

    /// The most pairs in one round.
    pub fn widest(&self) -> usize {
        match self {
            Self::AllPairs { size } => (*size / 2) as usize,
            Self::Listed(r) => r.iter().map(|r| r.pairs.len()).max().unwrap_or(0),
        }
    }
}

impl From<Schedule> for Rounds {
    fn from(s: Schedule) -> Self {
        Self::Listed(s.rounds)
    }
}

/// One bisection round: i ↔ i + N/2 for i < N/2, the lower rank serving;
/// for odd N the last rank idles.
///
/// # Errors
/// A size of 0 or above [`MAX_RANKS`].
pub fn quick(size: u32) -> Result<Schedule, ScheduleError> {
    check_size(size)?;
    if size == 1 {
        return Ok(Schedule::default());
    }
    let half = size / 2;
    let pairs = (0..half)
        .map(|i| Pair {
            server: i,
            client: i + half,
        })
        .collect();
    Ok(Schedule {
        rounds: vec![Round::of(size, pairs)],
    })
}

/// The quick mode's second pass: each suspect rank meets a known-good
/// rank it has not met yet where one is free (`met(a, b)` says whether
/// they were paired before), the good rank serving. A round holds as many
/// suspects as there are good ranks; more suspects take more rounds (so
/// this returns rounds, not one round, and no suspect is left idle). With
/// no good rank at all there is nothing to retest against: no rounds.
///
/// Inputs are taken as facts, not trusted: ranks at or above `size` (and
/// `size` itself above [`MAX_RANKS`]) are dropped, duplicates count once,
/// and a rank listed as both suspect and good is a suspect.
pub fn retest(
    size: u32,
    suspects: &[Rank],
    good: &[Rank],
    met: &dyn Fn(Rank, Rank) -> bool,
) -> Vec<Round> {
    let size = size.min(MAX_RANKS);
    let mut suspect = vec![false; size as usize];
    let suspects: Vec<Rank> = suspects
        .iter()
        .copied()
        .filter(|&s| s < size && !std::mem::replace(&mut suspect[s as usize], true))
        .collect();
    let mut taken = suspect;
    let good: Vec<Rank> = good
        .iter()
        .copied()
        .filter(|&g| g < size && !std::mem::replace(&mut taken[g as usize], true))
        .collect();
    if good.is_empty() {
        return Vec::new();
    }
    suspects
        .chunks(good.len())
        .map(|chunk| {
            let mut free = good.clone();
            let pairs = chunk
                .iter()
                .map(|&s| {
                    let at = free.iter().position(|&g| !met(s, g)).unwrap_or(0);
                    Pair {
                        server: free.remove(at),
                        client: s,
                    }
                })
                .collect();
            Round::of(size, pairs)
        })
        .collect()
}

/// Every i ↔ (i + 1) mod N, as disjoint pairs: even i then odd i (2
/// rounds) for even N; odd N needs a third round for the pair that wraps
/// around. i serves. N = 2 is one pair.
///
/// # Errors
/// A size of 0 or above [`MAX_RANKS`].
pub fn ring(size: u32) -> Result<Schedule, ScheduleError> {
    check_size(size)?;
    if size == 1 {
        return Ok(Schedule::default());
    }
    if size == 2 {
        return Ok(Schedule {
            rounds: vec![Round::of(
                size,
                vec![Pair {
                    server: 0,
                    client: 1,
                }],
            )],
        });
    }
    let link = |i: Rank| Pair {
        server: i,
        client: (i + 1) % size,
    };
    // Links i for i = 0..N; even-numbered and odd-numbered links are
    // disjoint, except for odd N where link N − 1 (wrapping to 0) meets
    // link 0: it goes last, alone.
    let last = if size % 2 == 1 { size - 1 } else { size };
    let mut rounds = vec![
        Round::of(size, (0..last).step_by(2).map(link).collect()),
        Round::of(size, (1..last).step_by(2).map(link).collect()),
    ];
    if last < size {
        rounds.push(Round::of(size, vec![link(size - 1)]));
    }
    Ok(Schedule { rounds })
}

/// A schedule from a pairs file: lines `ROUND A B` (`#` starts a comment;
/// blank lines are skipped). A and B are ranks or names `names` resolves
/// (host names); A serves. Rounds run in ascending order of their
/// numbers, whatever numbers are used.
///
/// # Errors
/// The first bad line, by number: a wrong field count, a round that is
/// not a number, an unknown name, a rank out of range, A = B, a rank twice
/// in one round; a file above [`MAX_PAIRS_FILE_LINES`] lines, or one
/// whose rounds × `size` exceed [`MAX_PAIRS_FILE_SLOTS`].
pub fn from_pairs_file(
    text: &str,
    names: &dyn Fn(&str) -> Option<Rank>,
    size: u32,
) -> Result<Schedule, ScheduleError> {
    check_size(size)?;
    let mut rounds: BTreeMap<u64, Vec<Pair>> = BTreeMap::new();
    // (round, rank) already paired: O(lines), not O(rounds × size).
    let mut busy: HashSet<(u64, Rank)> = HashSet::new();
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        if line > MAX_PAIRS_FILE_LINES {
            return Err(ScheduleError::PairsFileTooLong);
        }
        let bad = |why: String| ScheduleError::PairsFile { line, why };
        let content = raw.split('#').next().unwrap_or("");
        let fields: Vec<&str> = content.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let [round, a, b] = fields[..] else {
            return Err(bad(format!(
                "{} fields, expected 3 (ROUND A B)",
                fields.len()
            )));
        };
        let round: u64 = round
            .parse()
            .map_err(|_| bad(format!("round {round:?} is not a number")))?;
        let rank = |f: &str| -> Result<Rank, ScheduleError> {
            let r = match f.parse::<Rank>() {
                Ok(r) => r,
                Err(_) => names(f)
                    .ok_or_else(|| bad(format!("{f:?} is neither a rank nor a known host")))?,
            };
            if r >= size {
                return Err(bad(format!(
                    "rank {r} is out of range: the job has {size} ranks"
                )));
            }
            Ok(r)
        };
        let (a, b) = (rank(a)?, rank(b)?);
        if a == b {
            return Err(bad(format!("rank {a} is paired with itself")));
        }
        for r in [a, b] {
            if !busy.insert((round, r)) {
                return Err(bad(format!("rank {r} is in two pairs of round {round}")));
            }
        }
        rounds.entry(round).or_default().push(Pair {
            server: a,
            client: b,
        });
    }
    if rounds.len() as u64 * u64::from(size) > MAX_PAIRS_FILE_SLOTS {
        return Err(ScheduleError::PairsFileTooBig {
            rounds: rounds.len(),
            size,
        });
    }
    Ok(Schedule {
        rounds: rounds
            .into_values()
            .map(|pairs| Round::of(size, pairs))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every unordered pair exactly once, and each rank's server roles.
    fn coverage(s: &Schedule, size: u32) -> Vec<(u32, u32)> {
        let mut seen = HashSet::new();
        let mut roles = vec![(0u32, 0u32); size as usize]; // (pairs, serves)
        for round in &s.rounds {
            for p in &round.pairs {
                assert!(seen.insert(p.ranks()), "{p:?} twice");
                roles[p.server as usize].0 += 1;
                roles[p.server as usize].1 += 1;
                roles[p.client as usize].0 += 1;
            }
        }
        let n = u64::from(size);
        assert_eq!(seen.len() as u64, n * (n - 1) / 2);
        roles
    }

    /// The materialised all-pairs schedule as it was built before rounds
    /// were computed one at a time (kept as the oracle).
    fn all_pairs_materialised(size: u32) -> Vec<Round> {
        if size == 1 {
            return Vec::new();
        }
        let m = size + size % 2;
        (0..m - 1)
            .map(|r| {
                let pairs = (0..m)
                    .filter_map(|i| {
                        let p = circle_partner(m, r, i);
                        (p < size && i < size && circle_serves(m, r, i, p)).then_some(Pair {
                            server: i,
                            client: p,
                        })
                    })
                    .collect();
                Round::of(size, pairs)
            })
            .collect()
    }

    #[test]
    fn each_round_computed_alone_is_the_materialised_schedule_s_round() {
        for size in (2..=64).chain([1_023, 1_024]) {
            let old = all_pairs_materialised(size);
            let rounds = Rounds::AllPairs { size };
            assert_eq!(rounds.count() as usize, old.len(), "N = {size}");
            for (k, want) in old.iter().enumerate() {
                assert_eq!(
                    rounds.round(k as u32).as_ref(),
                    Some(want),
                    "N = {size}, round {k}"
                );
            }
            assert_eq!(rounds.round(rounds.count()), None);
            let pairs: usize = old.iter().map(|r| r.pairs.len()).sum();
            assert_eq!(rounds.pair_count(), pairs as u64, "N = {size}");
            let widest = old.iter().map(|r| r.pairs.len()).max().unwrap_or(0);
            assert_eq!(rounds.widest(), widest, "N = {size}");
        }
        // Past the last round: empty, every rank idle, never a panic.
        assert!(all_pairs_round(4, 3).pairs.is_empty());
        assert_eq!(all_pairs_rounds(1), 0);
    }

    #[test]
    fn all_pairs_meets_every_pair_once_with_no_rank_twice_a_round_and_roles_balanced() {
        for size in (1..=64).chain([1_023, 1_024]) {
            let s = all_pairs(size).unwrap();
            s.check(size).unwrap();
            let even = size % 2 == 0;
            let rounds = match size {
                1 => 0,
                _ if even => size - 1,
                _ => size,
            };
            assert_eq!(s.rounds.len(), rounds as usize, "N = {size}");
            for r in &s.rounds {
                assert_eq!(r.pairs.len() as u32, size / 2, "N = {size}");
                assert_eq!(r.idle.len(), usize::from(!even), "N = {size}");
            }
            if !even && size > 1 {
                // Each rank sits out exactly one round.
                let mut idle: Vec<Rank> = s.rounds.iter().flat_map(|r| r.idle.clone()).collect();
                idle.sort_unstable();
                assert_eq!(idle, (0..size).collect::<Vec<_>>(), "N = {size}");
            }
            for (rank, (pairs, serves)) in coverage(&s, size).into_iter().enumerate() {
                assert_eq!(pairs, size - 1);
                assert!(
                    serves == pairs / 2 || serves == pairs.div_ceil(2),
                    "N = {size}: rank {rank} serves {serves} of {pairs}"
                );
            }
        }
    }

    #[test]
    fn at_1024_nodes_523776_pairs_take_1023_rounds_about_85_minutes_at_5_s() {
        let s = all_pairs(1_024).unwrap();
        assert_eq!(s.pair_count(), 523_776);
        assert_eq!(s.rounds.len(), 1_023);
        assert_eq!(s.estimate_seconds(5.0), 5_115.0);
        // One at a time: 30.3 days.
        let one_at_a_time = s.pair_count() as f64 * 5.0 / 86_400.0;
        assert!((one_at_a_time - 30.31).abs() < 0.01, "{one_at_a_time}");
    }

    #[test]
    fn in_a_job_of_six_every_rank_serves_some_of_its_pairs() {
        // "The lower rank serves in even rounds" left rank 3 never serving.
        let s = all_pairs(6).unwrap();
        let roles = coverage(&s, 6);
        assert!(
            roles
                .iter()
                .all(|&(k, serves)| k == 5 && (2..=3).contains(&serves)),
            "{roles:?}"
        );
    }

    #[test]
    fn a_rank_sees_its_partners_round_by_round() {
        let s = all_pairs(4).unwrap();
        let mine = s.pairs_of(0);
        assert_eq!(mine.len(), 3);
        let partners: HashSet<Rank> = mine.iter().map(|(_, p)| p.other(0).unwrap()).collect();
        assert_eq!(partners, HashSet::from([1, 2, 3]));
        for (round, p) in mine {
            assert_eq!(s.partner(round, 0), p.other(0));
        }
        assert_eq!(s.partner(99, 0), None);
    }

    #[test]
    fn quick_is_one_bisection_round_and_odd_n_leaves_the_last_idle() {
        let s = quick(8).unwrap();
        assert_eq!(s.rounds.len(), 1);
        assert_eq!(
            s.rounds[0].pairs,
            (0..4)
                .map(|i| Pair {
                    server: i,
                    client: i + 4
                })
                .collect::<Vec<_>>()
        );
        let s = quick(7).unwrap();
        s.check(7).unwrap();
        assert_eq!(s.rounds[0].pairs.len(), 3);
        assert_eq!(s.rounds[0].idle, [6]);
        assert_eq!(quick(1).unwrap().rounds.len(), 0);
    }

    #[test]
    fn retests_pair_each_suspect_with_a_good_rank_it_has_not_met() {
        // Bisection of 8: pair (1, 5) failed.
        let first = quick(8).unwrap();
        let met = |a: Rank, b: Rank| {
            first.rounds[0]
                .pairs
                .iter()
                .any(|p| p.ranks() == (a.min(b), a.max(b)))
        };
        let rounds = retest(8, &[1, 5], &[0, 4, 2, 6], &met);
        assert_eq!(rounds.len(), 1);
        Schedule {
            rounds: rounds.clone(),
        }
        .check(8)
        .unwrap();
        for p in &rounds[0].pairs {
            assert!(
                [0, 4, 2, 6].contains(&p.server),
                "a known-good rank serves: {p:?}"
            );
            assert!(!met(p.server, p.client), "a new partner: {p:?}");
        }
        // More suspects than good ranks: more rounds; no good rank: none.
        let rounds = retest(8, &[1, 3, 5, 7], &[0, 2], &|_, _| false);
        assert_eq!(rounds.len(), 2);
        assert!(rounds.iter().all(|r| r.pairs.len() == 2));
        assert!(retest(8, &[1], &[], &|_, _| false).is_empty());
        // Repeats, out-of-range ranks and a rank both suspect and good.
        let rounds = retest(8, &[1, 1, 9, 2], &[2, 0, 0, 8], &|_, _| false);
        assert_eq!(rounds.len(), 2);
        Schedule { rounds }.check(8).unwrap();
        assert!(retest(u32::MAX, &[u32::MAX - 1], &[0], &|_, _| false).is_empty());
    }

    #[test]
    fn the_ring_links_each_rank_to_the_next_in_two_rounds_or_three_for_odd_n() {
        for size in 2..=33 {
            let s = ring(size).unwrap();
            s.check(size).unwrap();
            let want = match size {
                2 => 1,
                _ if size % 2 == 0 => 2,
                _ => 3,
            };
            assert_eq!(s.rounds.len(), want, "N = {size}");
            let mut links: Vec<(Rank, Rank)> = s
                .rounds
                .iter()
                .flat_map(|r| r.pairs.iter().map(|p| (p.server, p.client)))
                .collect();
            links.sort_unstable();
            let expect: Vec<(Rank, Rank)> = if size == 2 {
                vec![(0, 1)]
            } else {
                (0..size).map(|i| (i, (i + 1) % size)).collect()
            };
            assert_eq!(links, expect, "N = {size}");
        }
    }

    #[test]
    fn a_pairs_file_groups_rounds_by_number_and_resolves_host_names() {
        let names = |h: &str| match h {
            "node-a" => Some(0),
            "node-b" => Some(1),
            _ => None,
        };
        let text = "# ClusterKit-style custom schedule\n\n7 node-a 2\n7 node-b 3 # rack 2\n3 2 1\n";
        let s = from_pairs_file(text, &names, 4).unwrap();
        assert_eq!(s.rounds.len(), 2);
        assert_eq!(
            s.rounds[0].pairs,
            [Pair {
                server: 2,
                client: 1
            }]
        );
        assert_eq!(s.rounds[0].idle, [0, 3]);
        assert_eq!(
            s.rounds[1].pairs,
            [
                Pair {
                    server: 0,
                    client: 2
                },
                Pair {
                    server: 1,
                    client: 3
                }
            ]
        );
    }

    #[test]
    fn a_bad_pairs_file_line_is_named_with_its_number_and_fault() {
        let names = |_: &str| None;
        let err = |text: &str| from_pairs_file(text, &names, 4).unwrap_err().to_string();
        assert_eq!(
            err("0 1"),
            "pairs file line 1: 2 fields, expected 3 (ROUND A B)"
        );
        assert_eq!(
            err("x 0 1"),
            "pairs file line 1: round \"x\" is not a number"
        );
        assert_eq!(
            err("0 0 1\n0 ghost 1"),
            "pairs file line 2: \"ghost\" is neither a rank nor a known host"
        );
        assert_eq!(
            err("0 0 4"),
            "pairs file line 1: rank 4 is out of range: the job has 4 ranks"
        );
        assert_eq!(
            err("0 2 2"),
            "pairs file line 1: rank 2 is paired with itself"
        );
        assert_eq!(
            err("0 0 1\n0 1 2"),
            "pairs file line 2: rank 1 is in two pairs of round 0"
        );
    }

    #[test]
    fn a_pairs_file_too_long_or_too_big_is_refused_before_it_is_built() {
        let names = |_: &str| None;
        let long = "\n".repeat(MAX_PAIRS_FILE_LINES + 1);
        assert_eq!(
            from_pairs_file(&long, &names, 4).unwrap_err(),
            ScheduleError::PairsFileTooLong
        );
        // 1,025 one-pair rounds of 65,536 ranks: 67 Mi idle slots.
        let big: String = (0..1_025).map(|r| format!("{r} 0 1\n")).collect();
        assert_eq!(
            from_pairs_file(&big, &names, MAX_RANKS).unwrap_err(),
            ScheduleError::PairsFileTooBig {
                rounds: 1_025,
                size: MAX_RANKS
            }
        );
        assert_eq!(
            from_pairs_file("0 0 1", &names, 0).unwrap_err(),
            ScheduleError::Size(0)
        );
    }

    #[test]
    fn the_circle_method_fixes_the_last_rank_and_rotates_the_rest() {
        // M = 6, round 2 (fleet.md §5): 5 ↔ 2, then (4 − i) mod 5.
        let partners: Vec<Rank> = (0..6).map(|i| circle_partner(6, 2, i)).collect();
        assert_eq!(partners, [4, 3, 5, 1, 0, 2]);
        assert_eq!(circle_partner(0, 0, 0), 0);
        assert_eq!(circle_partner(1, 0, 0), 0);
        // Every round is a perfect matching of the M ranks.
        for r in 0..5 {
            for i in 0..6 {
                assert_eq!(circle_partner(6, r, circle_partner(6, r, i)), i);
            }
        }
    }

    #[test]
    fn patterns_parse_from_their_words_and_sizes_are_bounded() {
        assert_eq!("all-pairs".parse::<Pattern>().unwrap(), Pattern::AllPairs);
        assert_eq!("quick".parse::<Pattern>().unwrap().to_string(), "quick");
        assert_eq!(
            "mesh".parse::<Pattern>().unwrap_err().to_string(),
            "--pattern \"mesh\": one of all-pairs, quick, ring"
        );
        assert_eq!(all_pairs(0).unwrap_err(), ScheduleError::Size(0));
        assert_eq!(
            ring(MAX_RANKS + 1).unwrap_err(),
            ScheduleError::Size(MAX_RANKS + 1)
        );
    }

    #[test]
    fn a_broken_schedule_fails_its_check_naming_the_round_and_rank() {
        let twice = Schedule {
            rounds: vec![Round {
                pairs: vec![
                    Pair {
                        server: 0,
                        client: 1,
                    },
                    Pair {
                        server: 1,
                        client: 2,
                    },
                ],
                idle: vec![],
            }],
        };
        assert_eq!(
            twice.check(3).unwrap_err().to_string(),
            "round 0 has rank 1 in two pairs"
        );
        let idle_wrong = Schedule {
            rounds: vec![Round {
                pairs: vec![Pair {
                    server: 0,
                    client: 1,
                }],
                idle: vec![],
            }],
        };
        assert_eq!(
            idle_wrong.check(3).unwrap_err(),
            ScheduleError::IdleMismatch { round: 0 }
        );
    }
}
