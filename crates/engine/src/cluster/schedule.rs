//! The rounds of pair tests: who meets whom, when, and who serves.
//!
//! - [`all_pairs`]: the circle method, every pair exactly once; odd N
//!   gets a phantom rank whose partner sits the round out, so no rank is
//!   ever in two pairs at once.
//! - [`quick`]: one bisection round (i ↔ i + N/2); [`retest`] pairs its
//!   suspects with known-good ranks, so a verdict can say node or link.
//! - [`ring`]: every i ↔ i + 1 as disjoint pairs in 2 rounds (3 for odd N).
//! - [`from_pairs_file`]: ClusterKit's custom format, `ROUND A B` lines.
//! - [`Leaves`]: nodes in groups (under one leaf switch each): one round
//!   within the groups, then every pair of groups by the circle method,
//!   G − 1 rounds (G for odd G) instead of N − 1; [`quick_across`] is
//!   the bisection with each partner in another group where there is one.
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
    /// Within each group of nodes (a leaf switch's), then every pair of
    /// groups by the circle method ([`Leaves`]).
    Leaves,
}

impl FromStr for Pattern {
    type Err = ScheduleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all-pairs" => Ok(Self::AllPairs),
            "quick" => Ok(Self::Quick),
            "ring" => Ok(Self::Ring),
            "leaves" => Ok(Self::Leaves),
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
            Self::Leaves => "leaves",
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
    #[error("--pattern {0:?}: one of all-pairs, quick, ring, leaves")]
    UnknownPattern(String),
    /// `--pattern leaves` without the nodes' groups to schedule by.
    #[error("--pattern leaves needs the nodes' groups (their leaf switches): no topology was read")]
    NoGroups,
    /// Groups that are not a partition of the job's ranks.
    #[error("groups: {0}")]
    Groups(String),
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

/// The rounds of a run, each taken when it is due: all pairs and the
/// leaves schedule computed round by round (never the whole schedule in
/// memory: all pairs of 16,384 ranks would be a gigabyte of pairs), or a
/// short list (quick, ring, a pairs file, the retests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rounds {
    /// [`all_pairs_round`] of this many ranks.
    AllPairs {
        /// The job's size.
        size: u32,
    },
    /// [`Leaves::round`] of these groups.
    Leaves(Box<Leaves>),
    /// These rounds, in order.
    Listed(Vec<Round>),
}

impl Rounds {
    /// How many rounds.
    pub fn count(&self) -> u32 {
        match self {
            Self::AllPairs { size } => all_pairs_rounds(*size),
            Self::Leaves(l) => l.count(),
            Self::Listed(r) => u32::try_from(r.len()).unwrap_or(u32::MAX),
        }
    }

    /// Round `k`, if there is one.
    pub fn round(&self, k: u32) -> Option<Round> {
        match self {
            Self::AllPairs { size } => {
                (k < all_pairs_rounds(*size)).then(|| all_pairs_round(*size, k))
            }
            Self::Leaves(l) => l.round(k),
            Self::Listed(r) => r.get(k as usize).cloned(),
        }
    }

    /// Pairs in all rounds.
    pub fn pair_count(&self) -> u64 {
        match self {
            Self::AllPairs { size } => u64::from(*size) * u64::from(size.saturating_sub(1)) / 2,
            Self::Leaves(l) => l.pair_count(),
            Self::Listed(r) => r.iter().map(|r| r.pairs.len() as u64).sum(),
        }
    }

    /// The most pairs in one round.
    pub fn widest(&self) -> usize {
        match self {
            Self::AllPairs { size } => (*size / 2) as usize,
            Self::Leaves(l) => l.widest(),
            Self::Listed(r) => r.iter().map(|r| r.pairs.len()).max().unwrap_or(0),
        }
    }
}

impl From<Schedule> for Rounds {
    fn from(s: Schedule) -> Self {
        Self::Listed(s.rounds)
    }
}

impl From<Leaves> for Rounds {
    fn from(l: Leaves) -> Self {
        Self::Leaves(Box::new(l))
    }
}

/// The pair of `a` and `b`, the lower rank serving (as in [`quick`] and
/// [`ring`]).
fn lower_serves(a: Rank, b: Rank) -> Pair {
    Pair {
        server: a.min(b),
        client: a.max(b),
    }
}

/// Pairs `ranks[i]` with `ranks[i + ⌊n/2⌋]` (the bisection of a list);
/// for odd n the last sits out.
fn bisect(ranks: &[Rank], pairs: &mut Vec<Pair>) {
    let (low, high) = ranks.split_at(ranks.len() / 2);
    pairs.extend(low.iter().zip(high).map(|(&a, &b)| lower_serves(a, b)));
}

/// Pairs ranks of different `blocks` only, as many as can be: ⌊T/2⌋ of
/// T ranks, unless one block holds more than half of them, when every
/// other rank meets one of its ranks (T − m pairs). Each block's paired
/// ranks are a prefix of it. The ranks left unpaired, in order: at most
/// one, or the rest of the block that held more than half.
fn cross_match(blocks: &[&[Rank]], pairs: &mut Vec<Pair>) -> Vec<Rank> {
    let total: usize = blocks.iter().map(|b| b.len()).sum();
    let half = total / 2;
    let (big, most) =
        blocks.iter().enumerate().fold(
            (0, 0),
            |(bi, bm), (i, b)| {
                if b.len() > bm { (i, b.len()) } else { (bi, bm) }
            },
        );
    if most > half {
        // Every other rank meets the next rank of the big block.
        let others = blocks
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != big)
            .flat_map(|(_, b)| b.iter().copied());
        let mut met = 0;
        for (a, &b) in others.zip(blocks[big]) {
            pairs.push(lower_serves(a, b));
            met += 1;
        }
        blocks[big][met..].to_vec()
    } else {
        // No block holds more than half: i and i + ⌊T/2⌋ of the blocks
        // laid end to end are never in one block.
        let all: Vec<Rank> = blocks.iter().flat_map(|b| b.iter().copied()).collect();
        bisect(&all[..2 * half], pairs);
        all[2 * half..].to_vec()
    }
}

/// How many pairs [`cross_match`] makes of blocks of `total` ranks, the
/// largest of `most`.
fn cross_match_count(total: u32, most: u32) -> u32 {
    if most > total / 2 {
        total - most
    } else {
        total / 2
    }
}

/// That `groups` partition the ranks 0 ..= N − 1, N their total: no
/// group empty, no rank out of range or in two groups. N.
fn check_groups(groups: &[Vec<Rank>]) -> Result<u32, ScheduleError> {
    let total: usize = groups.iter().map(Vec::len).sum();
    let size = u32::try_from(total).unwrap_or(u32::MAX);
    check_size(size)?;
    let mut owner = vec![usize::MAX; total];
    for (g, ranks) in groups.iter().enumerate() {
        if ranks.is_empty() {
            return Err(ScheduleError::Groups(format!("group {g} is empty")));
        }
        for &r in ranks {
            let Some(slot) = owner.get_mut(r as usize) else {
                return Err(ScheduleError::Groups(format!(
                    "rank {r} of group {g} is out of range: the groups hold {size} ranks"
                )));
            };
            let was = std::mem::replace(slot, g);
            if was != usize::MAX {
                return Err(ScheduleError::Groups(format!(
                    "rank {r} is in groups {was} and {g}"
                )));
            }
        }
    }
    Ok(size)
}

/// One bisection round with each rank's partner in another group where
/// there is one, so the pair crosses the groups' uplinks: the groups laid
/// end to end in their order, i ↔ i + ⌊N/2⌋ of that list (never one
/// group when none holds more than half the ranks; groups that are runs
/// of consecutive ranks in rank order give exactly [`quick`]'s pairs).
/// When one group holds more than half, every other rank meets one of
/// its ranks and the rest of it are bisected among themselves (one
/// group: its bisection, [`quick`] when it is every rank in order). The
/// lower rank serves; for odd N one rank sits out.
///
/// # Errors
/// Groups that are not a partition of 0 ..= N − 1 (N their total, 1 to
/// [`MAX_RANKS`]), or with an empty group.
pub fn quick_across(groups: &[Vec<Rank>]) -> Result<Schedule, ScheduleError> {
    let size = check_groups(groups)?;
    if size == 1 {
        return Ok(Schedule::default());
    }
    let blocks: Vec<&[Rank]> = groups.iter().map(Vec::as_slice).collect();
    let mut pairs = Vec::with_capacity(size as usize / 2);
    let rest = cross_match(&blocks, &mut pairs);
    bisect(&rest, &mut pairs);
    Ok(Schedule {
        rounds: vec![Round::of(size, pairs)],
    })
}

/// The `leaves` schedule (`--pattern leaves`) of nodes in G groups (the
/// nodes under one leaf switch, or one scalable unit of a rail-optimised
/// fabric; the ranks of no known switch are one group), each round
/// computed when it is due:
///
/// - **Round 0, within the groups**: each group bisected
///   (`g[i] ↔ g[i + ⌊s/2⌋]`), an odd group's last node sitting out, so
///   its directions cross no uplink: a node that fails here is the node.
///   No round 0 when every group is one node.
/// - **Then the circle method over the groups** ([`circle_partner`] of
///   the G groups, a phantom group for odd G): in each round every group
///   meets one other group and their nodes are matched one to one, so a
///   group's uplinks carry all of its nodes' traffic at once. G − 1
///   rounds for even G, G for odd G (each group has a bye once); every
///   pair of groups meets exactly once.
/// - **Unequal sizes**: when a group of a nodes meets one of b < a, b of
///   its nodes are matched, a run that turns round the group from round
///   to round (it starts where the last such run ended), so the times
///   the group's nodes are matched with its partner groups differ by at
///   most one from node to node. Its a − b
///   leftovers, and a group's nodes in its bye round, meet the other
///   groups' leftovers of the round (`cross_match`: never two of one
///   group, as many pairs as can be) or sit out.
///
/// The lower rank serves. Memory: the groups (4 bytes a rank), a count a
/// round, and for each group size above the smallest a table of G
/// 2-byte sums (none when the sizes are equal; at most about 18 MB for
/// the worst mix of sizes of 65,536 ranks). Building it counts every
/// round's pairs: O(K) a round for K groups not of the commonest size
/// (none when the sizes are equal; 1 s for the worst, 65,536 ranks in
/// 10,922 groups of 2 and 43,692 of 1, release build, 2-core machine).
#[derive(Clone, PartialEq, Eq)]
pub struct Leaves {
    /// The ranks.
    size: u32,
    /// The groups' ranks, in the groups' order.
    groups: Vec<Vec<Rank>>,
    /// Whether round 0 is the round within the groups.
    intra: bool,
    /// Pairs in each round, in order.
    counts: Vec<u32>,
    /// Per group, its index in `turns`, or `NO_TURN` when it is of the
    /// smallest size (then no partner is smaller and its run is all of
    /// it).
    turn_of: Vec<u32>,
    /// Per group size a above the smallest: prefix sums, mod a, of the
    /// sizes below a of the groups in the circle method's order of
    /// partners (`partners_in_order`): where a group of a nodes starts
    /// its run in any round, in O(1).
    turns: Vec<Vec<u16>>,
}

/// [`Leaves::turn_of`]'s mark for a group of the smallest size.
const NO_TURN: u32 = u32::MAX;

impl fmt::Debug for Leaves {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (lo, hi) = self.group_sizes();
        f.debug_struct("Leaves")
            .field("size", &self.size)
            .field("groups", &self.groups.len())
            .field("group_sizes", &(lo..=hi))
            .field("rounds", &self.count())
            .finish_non_exhaustive()
    }
}

impl Leaves {
    /// The schedule of `groups`: each a group's ranks (in any order, the
    /// order kept), the groups in a fixed order; together they must be
    /// the ranks 0 ..= N − 1, each once.
    ///
    /// # Errors
    /// [`ScheduleError::Size`] for a total of 0 or above [`MAX_RANKS`];
    /// [`ScheduleError::Groups`] for an empty group, a rank out of range
    /// or in two groups.
    pub fn new(groups: &[Vec<Rank>]) -> Result<Self, ScheduleError> {
        let size = check_groups(groups)?;
        let g = groups.len() as u32;
        let lens: Vec<u32> = groups.iter().map(|r| r.len() as u32).collect();
        let lo = lens.iter().copied().min().unwrap_or(0);
        let hi = lens.iter().copied().max().unwrap_or(0);
        let intra = hi >= 2;
        let cross = all_pairs_rounds(g);
        let mut counts = Vec::with_capacity(cross as usize + 1);
        if intra {
            counts.push(lens.iter().map(|l| l / 2).sum());
        }
        let mut turn_of = vec![NO_TURN; groups.len()];
        let mut turns = Vec::new();
        if lo == hi {
            // Every meeting matches all of both groups; a bye's group has
            // no one to meet.
            counts.extend(std::iter::repeat_n(g / 2 * lo, cross as usize));
        } else {
            let mut sorted = lens.clone();
            sorted.sort_unstable();
            let commonest = sorted
                .chunk_by(|a, b| a == b)
                .max_by_key(|run| run.len())
                .map_or(lo, |run| run[0]);
            let common: Vec<bool> = lens.iter().map(|&l| l == commonest).collect();
            let odd: Vec<u32> = (0..g).filter(|&a| !common[a as usize]).collect();
            counts.extend((0..cross).map(|q| cross_count(&lens, &common, &odd, size, q)));
            let mut sizes: Vec<u32> = lens.iter().copied().filter(|&a| a > lo).collect();
            sizes.sort_unstable();
            sizes.dedup();
            let order = partners_in_order(g);
            for &a in &sizes {
                // a ≤ N − 1 < 2¹⁶ (two groups at least): sums mod a fit.
                let mut sum = 0u32;
                let mut table = Vec::with_capacity(order.len() + 1);
                table.push(0u16);
                for &p in &order {
                    let b = lens[p as usize];
                    if b < a {
                        sum = (sum + b) % a;
                    }
                    table.push(sum as u16);
                }
                turns.push(table);
            }
            for (t, &a) in turn_of.iter_mut().zip(&lens) {
                if let Ok(i) = sizes.binary_search(&a) {
                    *t = i as u32;
                }
            }
        }
        Ok(Self {
            size,
            groups: groups.to_vec(),
            intra,
            counts,
            turn_of,
            turns,
        })
    }

    /// The job's ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The groups' ranks, in the groups' order.
    pub fn groups(&self) -> &[Vec<Rank>] {
        &self.groups
    }

    /// The smallest and the largest group's size.
    pub fn group_sizes(&self) -> (u32, u32) {
        let lens = self.groups.iter().map(|g| g.len() as u32);
        (lens.clone().min().unwrap_or(0), lens.max().unwrap_or(0))
    }

    /// Rounds within the groups: 1, or 0 when every group is one node.
    pub fn intra_rounds(&self) -> u32 {
        u32::from(self.intra)
    }

    /// Rounds between the groups: G − 1 for even G, G for odd G (each
    /// group's bye), 0 for one group.
    pub fn cross_rounds(&self) -> u32 {
        all_pairs_rounds(self.groups.len() as u32)
    }

    /// How many rounds: [`Self::intra_rounds`] + [`Self::cross_rounds`].
    pub fn count(&self) -> u32 {
        self.counts.len() as u32
    }

    /// Pairs in all rounds.
    pub fn pair_count(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }

    /// The most pairs in one round.
    pub fn widest(&self) -> usize {
        self.counts.iter().copied().max().unwrap_or(0) as usize
    }

    /// The group `group` meets in round `k`: none in the round within
    /// the groups, in its bye, or past the rounds.
    pub fn partner_group(&self, k: u32, group: u32) -> Option<u32> {
        let g = self.groups.len() as u32;
        let q = k.checked_sub(self.intra_rounds())?;
        if q >= self.cross_rounds() || group >= g {
            return None;
        }
        let p = circle_partner(g + g % 2, q, group);
        (p < g).then_some(p)
    }

    /// Round `k` (O(N)), if there is one.
    pub fn round(&self, k: u32) -> Option<Round> {
        let want = *self.counts.get(k as usize)? as usize;
        let mut pairs = Vec::with_capacity(want);
        if self.intra && k == 0 {
            for g in &self.groups {
                bisect(g, &mut pairs);
            }
            return Some(Round::of(self.size, pairs));
        }
        let q = k - self.intra_rounds();
        let g = self.groups.len() as u32;
        // The leftovers: the bigger group's unmatched run of each
        // meeting, and the bye's group.
        let mut leftovers: Vec<Vec<Rank>> = Vec::new();
        for (a, p) in partners(g, q).enumerate() {
            let a = a as u32;
            if p >= g {
                let group = &self.groups[a as usize];
                leftovers.push(turned(group, self.turn(q, a)).collect());
                continue;
            }
            if a > p {
                continue;
            }
            let (big, small) = if self.groups[a as usize].len() >= self.groups[p as usize].len() {
                (a, p)
            } else {
                (p, a)
            };
            let small = &self.groups[small as usize];
            let mut run = turned(&self.groups[big as usize], self.turn(q, big));
            pairs.extend(
                small
                    .iter()
                    .zip(run.by_ref())
                    .map(|(&x, y)| lower_serves(x, y)),
            );
            let rest: Vec<Rank> = run.collect();
            if !rest.is_empty() {
                leftovers.push(rest);
            }
        }
        let blocks: Vec<&[Rank]> = leftovers.iter().map(Vec::as_slice).collect();
        cross_match(&blocks, &mut pairs);
        Some(Round::of(self.size, pairs))
    }

    /// Where group `a`'s run starts in cross round `q`: the sizes of its
    /// partners before `q` that are smaller than it, summed mod its size
    /// (each such meeting matched that many of its nodes, from where the
    /// last run ended). O(1) from the tables; O(q) for the fixed group of
    /// even G (whose partners are the groups in order).
    fn turn(&self, q: u32, a: u32) -> u32 {
        let Some(table) = self.turns.get(self.turn_of[a as usize] as usize) else {
            return 0;
        };
        let g = self.groups.len() as u32;
        let own = self.groups[a as usize].len() as u64;
        let len = |i: u32| self.groups[i as usize].len() as u64;
        let smaller = |b: u64| if b < own { b } else { 0 };
        let n = u64::from(g + g % 2 - 1);
        if g.is_multiple_of(2) && a == g - 1 {
            return ((0..q).map(|t| smaller(len(t))).sum::<u64>() % own) as u32;
        }
        // Group a's partner in round r is the (r − a·h mod n)-th of
        // `partners_in_order` (h = 1/2 mod n): rounds 0 .. q are a run of
        // q in that cyclic order, its own place (the round it meets the
        // fixed group) counting 0.
        let h = n.div_ceil(2);
        let from = (n - u64::from(a) * h % n) % n;
        let to = from + u64::from(q);
        let at = |i: u64| u64::from(table[i as usize]);
        let mut sum = if to <= n {
            at(to) + own - at(from)
        } else {
            at(n) + own - at(from) + at(to - n)
        };
        if g.is_multiple_of(2) && a < q {
            sum += smaller(len(g - 1));
        }
        (sum % own) as u32
    }
}

/// Each group's partner in cross round `q` of the circle method over `g`
/// groups (a phantom group g for odd g: a partner ≥ g is a bye), group 0
/// first: [`circle_partner`] without a division a group.
fn partners(g: u32, q: u32) -> impl Iterator<Item = u32> {
    let m = g + g % 2;
    let n = m - 1;
    let base = if n == 0 {
        0
    } else {
        (2 * u64::from(q) % u64::from(n)) as u32
    };
    (0..g).map(move |a| {
        if a == m - 1 {
            q
        } else if a == q {
            m - 1
        } else if a <= base {
            base - a
        } else {
            base + n - a
        }
    })
}

/// The circle method's groups other than the fixed one (0 .. n, n = M − 1
/// for M = G rounded up to even) in the order a group meets them: the
/// t-th is group 2t mod n. Group a meets group (2r − a) mod n in round r,
/// the (r − a·h mod n)-th of this order (2h ≡ 1 mod n).
fn partners_in_order(g: u32) -> Vec<u32> {
    let n = u64::from(g + g % 2 - 1);
    (0..n).map(|t| (2 * t % n) as u32).collect()
}

/// Group `group`'s ranks from its `start`-th on, round the end.
fn turned(group: &[Rank], start: u32) -> impl Iterator<Item = Rank> + '_ {
    let (head, tail) = group.split_at(start as usize);
    tail.iter().chain(head).copied()
}

/// Pairs in cross round `q` of groups this large, of `size` ranks in
/// all, `odd` the groups not of the commonest size (`common`: of two
/// such groups that meet every node is matched). Each meeting matches
/// its smaller group's size; the leftovers, each meeting's difference in
/// size and the bye's group, meet as [`cross_match_count`] says. O(odd
/// groups).
fn cross_count(lens: &[u32], common: &[bool], odd: &[u32], size: u32, q: u32) -> u32 {
    let g = lens.len() as u32;
    let m = g + g % 2;
    // For odd G group q has its bye in round q (its partner is M − 1).
    let bye = if g % 2 == 1 { lens[q as usize] } else { 0 };
    let (mut total, mut most) = (0, 0);
    for &a in odd {
        let p = circle_partner(m, q, a);
        if p >= g || (!common[p as usize] && p < a) {
            continue;
        }
        let diff = lens[a as usize].abs_diff(lens[p as usize]);
        total += diff;
        most = most.max(diff);
    }
    (size - bye - total) / 2 + cross_match_count(total + bye, most.max(bye))
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

    /// The rounds' time at `per_round_s` seconds a round.
    fn report_span(r: &Rounds, per_round_s: f64) -> f64 {
        f64::from(r.count()) * per_round_s
    }

    /// Ranks 0 .. N laid into groups of these sizes, in rank order.
    fn groups_of(sizes: &[u32]) -> Vec<Vec<Rank>> {
        let mut next = 0;
        sizes
            .iter()
            .map(|&s| {
                next += s;
                (next - s..next).collect()
            })
            .collect()
    }

    /// Where group `a`'s run starts in each cross round, by walking the
    /// rounds (the oracle of [`Leaves::turn`]'s tables).
    fn turns_walked(l: &Leaves) -> Vec<Vec<u32>> {
        let g = l.groups().len();
        let len = |i: usize| l.groups()[i].len() as u32;
        let mut at = vec![0u32; g];
        let mut out = Vec::new();
        for q in 0..l.cross_rounds() {
            out.push(at.clone());
            for (a, start) in at.iter_mut().enumerate() {
                let p = circle_partner((g + g % 2) as u32, q, a as u32) as usize;
                if p < g && len(p) < len(a) {
                    *start = (*start + len(p)) % len(a);
                }
            }
        }
        out
    }

    /// Every property of the leaves schedule of `groups`; the schedule.
    fn leaves_checked(groups: &[Vec<Rank>]) -> Leaves {
        let l = Leaves::new(groups).unwrap();
        let size = l.size();
        let g = groups.len();
        let what = format!("{} groups, sizes {:?}", g, l.group_sizes());
        let mut group_of = vec![0usize; size as usize];
        for (i, ranks) in groups.iter().enumerate() {
            for &r in ranks {
                group_of[r as usize] = i;
            }
        }
        let len = |i: usize| groups[i].len();
        let rounds: Vec<Round> = (0..l.count()).map(|k| l.round(k).unwrap()).collect();
        assert_eq!(l.round(l.count()), None, "{what}");
        // Ranks valid, none with itself, none twice in a round, the idle
        // lists right.
        Schedule {
            rounds: rounds.clone(),
        }
        .check(size)
        .unwrap();
        let counted: Vec<u64> = rounds.iter().map(|r| r.pairs.len() as u64).collect();
        assert_eq!(l.pair_count(), counted.iter().sum::<u64>(), "{what}");
        assert_eq!(
            l.widest() as u64,
            counted.iter().copied().max().unwrap_or(0),
            "{what}"
        );
        for r in &rounds {
            assert!(
                r.pairs.iter().all(|p| p.server < p.client),
                "{what}: the lower rank serves"
            );
        }
        // The arithmetic: 1 round within, G − 1 (even G) or G (odd G)
        // between.
        let intra = groups.iter().any(|r| r.len() >= 2);
        let cross = match g {
            1 => 0,
            _ if g.is_multiple_of(2) => g - 1,
            _ => g,
        };
        assert_eq!(l.intra_rounds(), u32::from(intra), "{what}");
        assert_eq!(l.cross_rounds() as usize, cross, "{what}");
        assert_eq!(rounds.len(), usize::from(intra) + cross, "{what}");
        let cross_rounds = if intra {
            // Round 0: within the groups only, every node of a group but
            // an odd one's last.
            let r0 = &rounds[0];
            for p in &r0.pairs {
                assert_eq!(group_of[p.server as usize], group_of[p.client as usize]);
            }
            let want: usize = groups.iter().map(|r| r.len() / 2).sum();
            assert_eq!(r0.pairs.len(), want, "{what}");
            assert_eq!(l.partner_group(0, 0), None);
            &rounds[1..]
        } else {
            &rounds[..]
        };
        let first = u32::from(intra);
        let walked = turns_walked(&l);
        let mut met = vec![vec![0u32; g]; g];
        let mut byes = vec![0u32; g];
        // Per node, the rounds it met its group's partner group.
        let mut matched = vec![0u32; size as usize];
        for (q, round) in cross_rounds.iter().enumerate() {
            let k = first + q as u32;
            let partner = |a: usize| l.partner_group(k, a as u32).map(|p| p as usize);
            for a in 0..g {
                assert_eq!(
                    l.turn(q as u32, a as u32),
                    walked[q][a],
                    "{what}: q {q} a {a}"
                );
                match partner(a) {
                    None => byes[a] += 1,
                    Some(p) => {
                        assert_ne!(p, a);
                        assert_eq!(partner(p), Some(a), "{what}");
                        met[a][p] += 1;
                    }
                }
            }
            let mut meeting_pairs = vec![0usize; g];
            for p in &round.pairs {
                let (x, y) = (group_of[p.server as usize], group_of[p.client as usize]);
                assert_ne!(x, y, "{what}: round {k} pairs within a group: {p:?}");
                if partner(x) == Some(y) {
                    meeting_pairs[x] += 1;
                    meeting_pairs[y] += 1;
                    matched[p.server as usize] += 1;
                    matched[p.client as usize] += 1;
                } else {
                    // Leftovers: of a bye, or of a meeting's bigger group.
                    for (z, w) in [(x, y), (y, x)] {
                        assert!(
                            partner(z).is_none_or(|o| len(o) < len(z)),
                            "{what}: round {k}: {p:?} is no leftover of group {z} (meets {w})"
                        );
                    }
                }
            }
            for (a, &n) in meeting_pairs.iter().enumerate() {
                if let Some(p) = partner(a) {
                    // The meeting matches all of the smaller group: with
                    // equal sizes every node of both.
                    assert_eq!(n, len(a).min(len(p)), "{what}: round {k}");
                }
            }
            // The leftovers met as many as could: the idle are of one
            // group.
            let idle_groups: HashSet<usize> =
                round.idle.iter().map(|&r| group_of[r as usize]).collect();
            assert!(
                idle_groups.len() <= 1,
                "{what}: round {k}: idle {idle_groups:?}"
            );
        }
        // Every pair of groups met exactly once; one bye each for odd G.
        for (a, row) in met.iter().enumerate() {
            for (b, &n) in row.iter().enumerate() {
                assert_eq!(n, u32::from(a != b), "{what}: groups {a}, {b}");
            }
            assert_eq!(byes[a], u32::from(g % 2 == 1 && g > 1), "{what}");
        }
        // The runs turn: within a group, nodes met their partner groups a
        // number of times within one of each other.
        for (a, ranks) in groups.iter().enumerate() {
            let counts = ranks.iter().map(|&r| matched[r as usize]);
            let (lo, hi) = (counts.clone().min().unwrap(), counts.max().unwrap());
            assert!(hi - lo <= 1, "{what}: group {a} matched {lo} to {hi} times");
        }
        l
    }

    #[test]
    fn leaves_meets_every_pair_of_groups_once_for_1_to_64_groups() {
        for g in 1..=64u32 {
            let gs = g as usize;
            let mut shapes: Vec<Vec<u32>> = vec![
                vec![1; gs],
                vec![2; gs],
                vec![5; gs],
                // Unequal.
                (0..g).map(|i| (i * 7 + 3) % 6 + 1).collect(),
                // One-node groups among groups of 4.
                (0..g).map(|i| if i % 3 == 0 { 1 } else { 4 }).collect(),
                // One huge group (the unknown) among small ones.
                (0..g)
                    .map(|i| if i == g / 2 { 3 * g + 1 } else { i % 3 + 1 })
                    .collect(),
                // A short last leaf.
                (0..g).map(|i| if i == g - 1 { 3 } else { 8 }).collect(),
            ];
            if g <= 16 {
                shapes.push(vec![32; gs]);
                shapes.push((0..g).map(|i| i + 1).collect());
            }
            for sizes in &shapes {
                leaves_checked(&groups_of(sizes));
            }
            // Groups that are not runs of ranks: rank r in group r mod G.
            let n = 3 * g + g / 2;
            let interleaved: Vec<Vec<Rank>> =
                (0..g).map(|a| (a..n).step_by(gs).collect()).collect();
            leaves_checked(&interleaved);
        }
    }

    #[test]
    fn one_group_is_its_round_within_and_one_node_groups_have_none() {
        let l = leaves_checked(&groups_of(&[7]));
        assert_eq!((l.count(), l.pair_count()), (1, 3));
        assert_eq!(l.round(0).unwrap().idle, [6]);
        let l = leaves_checked(&groups_of(&[1, 1, 1, 1]));
        assert_eq!((l.intra_rounds(), l.cross_rounds()), (0, 3));
        assert_eq!(all_pairs_rounds(4), 3);
        let l = Leaves::new(&groups_of(&[1])).unwrap();
        assert_eq!((l.count(), l.round(0)), (0, None));
    }

    #[test]
    fn a_big_group_s_leftovers_meet_a_bye_s_nodes_and_its_run_turns() {
        // Groups of 6, 2 and 2 (G = 3): 3 cross rounds, each group's bye
        // once. Round 1 (q = 0): group 0 has its bye, 1 meets 2.
        let l = leaves_checked(&groups_of(&[6, 2, 2]));
        assert_eq!(l.partner_group(1, 0), None);
        let r = l.round(1).unwrap();
        assert_eq!(r.pairs, [lower_serves(6, 8), lower_serves(7, 9),]);
        // q = 1: group 0 meets 2 (ranks 8, 9: 0 and 1), group 1 has its
        // bye and meets group 0's leftovers 2 and 3.
        assert_eq!(l.partner_group(2, 0), Some(2));
        let r = l.round(2).unwrap();
        assert_eq!(
            r.pairs,
            [
                lower_serves(0, 8),
                lower_serves(1, 9),
                lower_serves(2, 6),
                lower_serves(3, 7),
            ]
        );
        assert_eq!(r.idle, [4, 5]);
        // q = 2: group 0 meets 1 from where its last run ended (2, 3).
        let r = l.round(3).unwrap();
        assert_eq!(r.pairs[..2], [lower_serves(2, 6), lower_serves(3, 7)]);
    }

    #[test]
    fn leaves_at_1024_and_16384_nodes_in_groups_of_32_against_all_pairs() {
        // By hand. N = 1,024 in G = 32 groups of 32: round 0 pairs within
        // each group, 32 × 16 = 512 pairs; then G − 1 = 31 rounds of
        // G/2 = 16 meetings × 32 pairs = 512 pairs. 32 rounds, 32 × 512 =
        // 16,384 pairs, 160 s at 5 s a round. All pairs: N − 1 = 1,023
        // rounds, 1,024 × 1,023 / 2 = 523,776 pairs, 5,115 s ≈ 85 min.
        //
        // N = 16,384 in G = 512 groups: 512 × 16 = 8,192 pairs in round
        // 0, then 511 rounds of 256 × 32 = 8,192: 512 rounds, 512 × 8,192
        // = 4,194,304 pairs, 2,560 s ≈ 43 min. All pairs: 16,383 rounds,
        // 16,384 × 16,383 / 2 = 134,209,536 pairs, 81,915 s ≈ 22 h 45 min.
        for (n, rounds, pairs, all_rounds, all_pairs_n) in [
            (1_024u32, 32u32, 16_384u64, 1_023u32, 523_776u64),
            (16_384, 512, 4_194_304, 16_383, 134_209_536),
        ] {
            let groups = groups_of(&vec![32; (n / 32) as usize]);
            let l = Leaves::new(&groups).unwrap();
            assert_eq!((l.intra_rounds(), l.cross_rounds()), (1, rounds - 1));
            assert_eq!(l.count(), rounds);
            assert_eq!(l.pair_count(), pairs);
            assert_eq!(l.widest(), n as usize / 2);
            let all = Rounds::AllPairs { size: n };
            assert_eq!((all.count(), all.pair_count()), (all_rounds, all_pairs_n));
            // Equal sizes: no turn tables, the groups are the memory.
            assert!(l.turns.is_empty());
            let leaves = Rounds::from(l);
            assert_eq!((leaves.count(), leaves.pair_count()), (rounds, pairs));
        }
        let time = |r: &Rounds| report_span(r, 5.0);
        assert_eq!(
            time(&Rounds::from(Leaves::new(&groups_of(&[32; 32])).unwrap())),
            160.0
        );
        assert_eq!(time(&Rounds::AllPairs { size: 1_024 }), 5_115.0);
        assert_eq!(
            time(&Rounds::from(Leaves::new(&groups_of(&[32; 512])).unwrap())),
            2_560.0
        );
        assert_eq!(time(&Rounds::AllPairs { size: 16_384 }), 81_915.0);
        // Every round of the 16,384: every node in one pair, every pair
        // of the 512 groups once.
        let groups = groups_of(&[32; 512]);
        let l = Leaves::new(&groups).unwrap();
        let mut met = HashSet::new();
        for k in 0..l.count() {
            let r = l.round(k).unwrap();
            assert_eq!((r.pairs.len(), r.idle.len()), (8_192, 0));
            let mut seen = vec![false; 16_384];
            for p in &r.pairs {
                for x in [p.server, p.client] {
                    assert!(!std::mem::replace(&mut seen[x as usize], true));
                }
                let (a, b) = (p.server / 32, p.client / 32);
                assert_eq!(a == b, k == 0);
                if k > 0 {
                    met.insert((a, b));
                }
            }
        }
        assert_eq!(met.len(), 512 * 511 / 2);
    }

    #[test]
    fn the_turn_tables_stay_small_for_a_bad_mix_of_sizes() {
        // One group of each size 2 ..= 60 among one-node groups: 59 tables
        // of G + 1 two-byte sums.
        let mut sizes: Vec<u32> = (2..=60).collect();
        sizes.extend(std::iter::repeat_n(1, 500));
        let l = Leaves::new(&groups_of(&sizes)).unwrap();
        assert_eq!(l.turns.len(), 59);
        assert!(l.turns.iter().all(|t| t.len() <= 560));
        leaves_checked(&groups_of(&sizes[..40]));
    }

    #[test]
    fn leaves_refuses_groups_that_are_not_the_ranks_once_each() {
        let err = |g: &[Vec<Rank>]| Leaves::new(g).unwrap_err().to_string();
        assert_eq!(err(&[vec![0, 1], vec![]]), "groups: group 1 is empty");
        assert_eq!(
            err(&[vec![0, 1], vec![1]]),
            "groups: rank 1 is in groups 0 and 1"
        );
        assert_eq!(
            err(&[vec![0, 3], vec![1]]),
            "groups: rank 3 of group 0 is out of range: the groups hold 3 ranks"
        );
        assert_eq!(Leaves::new(&[]).unwrap_err(), ScheduleError::Size(0));
        assert_eq!(
            quick_across(&[vec![1]]).unwrap_err().to_string(),
            "groups: rank 1 of group 0 is out of range: the groups hold 1 ranks"
        );
    }

    #[test]
    fn rounds_of_leaves_are_the_schedule_s_rounds() {
        let groups = groups_of(&[4, 3, 5, 1, 4]);
        let l = Leaves::new(&groups).unwrap();
        let rounds = Rounds::from(l.clone());
        assert_eq!(rounds.count(), l.count());
        assert_eq!(rounds.pair_count(), l.pair_count());
        assert_eq!(rounds.widest(), l.widest());
        for k in 0..=l.count() {
            assert_eq!(rounds.round(k), l.round(k));
        }
        let debug = format!("{rounds:?}");
        assert!(debug.contains("groups: 5"), "{debug}");
    }

    #[test]
    fn quick_across_groups_is_quick_without_them_and_crosses_with_them() {
        for n in 1..=64u32 {
            let quick_n = quick(n).unwrap();
            // No groups: one group of every rank.
            assert_eq!(quick_across(&[(0..n).collect()]).unwrap(), quick_n);
            // Groups that are runs of ranks, none above half: the same.
            for s in [1, 2, 4, 8] {
                if n % s == 0 && n > s {
                    let groups = groups_of(&vec![s; (n / s) as usize]);
                    assert_eq!(quick_across(&groups).unwrap(), quick_n, "N = {n}, s = {s}");
                }
            }
        }
        // Rail-style groups (even and odd ranks): quick pairs 0 ↔ 4 under
        // one leaf, quick_across never.
        let s = quick_across(&[vec![0, 2, 4, 6], vec![1, 3, 5, 7]]).unwrap();
        assert_eq!(
            s.rounds[0].pairs,
            [(0, 1), (2, 3), (4, 5), (6, 7)].map(|(a, b)| lower_serves(a, b))
        );
        // Every shape: as many pairs cross as can; the rest within the big
        // group; at most one rank idle.
        for g in 1..=24u32 {
            for sizes in [
                (0..g).map(|i| (i * 5 + 1) % 7 + 1).collect::<Vec<_>>(),
                (0..g)
                    .map(|i| if i == 0 { 4 * g } else { 1 + i % 2 })
                    .collect(),
            ] {
                let groups = groups_of(&sizes);
                let n: u32 = sizes.iter().sum();
                let most = *sizes.iter().max().unwrap();
                let s = quick_across(&groups).unwrap();
                s.check(n).unwrap();
                let round = &s.rounds[0];
                assert_eq!(round.pairs.len() as u32, n / 2);
                let group_of = |r: Rank| groups.iter().position(|g| g.contains(&r)).unwrap();
                let crossing = round
                    .pairs
                    .iter()
                    .filter(|p| group_of(p.server) != group_of(p.client))
                    .count() as u32;
                assert_eq!(crossing, cross_match_count(n, most), "{sizes:?}");
            }
        }
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
        assert_eq!("leaves".parse::<Pattern>().unwrap(), Pattern::Leaves);
        assert_eq!(Pattern::Leaves.to_string(), "leaves");
        assert_eq!(
            "mesh".parse::<Pattern>().unwrap_err().to_string(),
            "--pattern \"mesh\": one of all-pairs, quick, ring, leaves"
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
