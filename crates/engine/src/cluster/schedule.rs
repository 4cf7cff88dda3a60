//! The rounds of pair tests: who meets whom, when, and who serves.

use serde::Serialize;

/// A rank in the job: 0 ..= size − 1.
pub type Rank = u32;

/// Two ranks that test their link in one round. The server listens; the
/// client connects and drives the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Pair {
    /// The rank that serves (listens).
    pub server: Rank,
    /// The rank that connects.
    pub client: Rank,
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
