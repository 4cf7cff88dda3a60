//! Localising a fault to a leaf switch (issue 37): where each rank's
//! rails sit in the fabric ([`LeafLayout`], plain data built from a
//! topology file or Slurm's `SLURM_TOPOLOGY_ADDR`), and the rule that
//! tells a leaf whose uplinks are slow from the nodes under it.
//!
//! The rule, per rail (each rail is its own fabric, as in
//! [`super::verdict`]); a direction is *intra-leaf* when both its ports
//! sit under the same leaf on that rail, *cross-leaf* when both leaves
//! are known and differ (a port without a known leaf is no evidence
//! either way). "Failed" is any rule failed, before the slow-round
//! exemption (a slow round's failures are what this rule looks at
//! first; see below).
//!
//! 1. **A leaf is suspect** when
//!    - most of its cross-leaf directions failed (more than half of
//!      those not already explained by a leaf named before it), at
//!      least [`MIN_SWITCH_FAILED`] of them, spread over at least
//!      [`MIN_SWITCH_NODES`] of its nodes (one node's failures are that
//!      node's), and
//!    - its intra-leaf directions mostly passed (at least one measured,
//!      fewer than half failed): its nodes are fine among themselves.
//!      With no intra-leaf direction measured a leaf cannot be told
//!      from its nodes: it is never named (see 4).
//! 2. **One at a time, worst first** (the highest share of failed
//!    cross-leaf directions, then the most, then the lowest index):
//!    once a leaf is named its cross-leaf directions are explained, and
//!    the other leaves are judged on the rest — the leaves it met are
//!    not named for its fault, as a bad node does not fail every node
//!    that met it.
//! 3. **Two leaves look alike**: when a suspect leaf's unexplained
//!    cross-leaf directions all go to one other leaf (two leaves in the
//!    fabric, or a schedule that paired it with one leaf only), neither
//!    can be told from the other: the finding is "the uplinks between L
//!    and M", once, provided M also passes within itself and its
//!    failures also spread over two of its nodes (else nothing is
//!    named and the nodes are judged as usual).
//! 4. **A reference is needed**: unless the only finding is the uplinks
//!    between the rail's only two leaves, the cross-leaf directions
//!    between leaves not named must mostly pass (at least one measured).
//!    Otherwise everything above the leaves is slow — a spine, or
//!    congestion — and no leaf is named (the slow-round rule and the
//!    node rule judge as they would without a topology).
//! 5. **A leaf without intra-leaf evidence** whose cross-leaf directions
//!    mostly failed (at least [`MIN_SWITCH_FAILED`]) is a *note*
//!    ([`SwitchKind::Unresolved`]): "its uplinks cannot be told from
//!    its nodes", which are judged as usual; only while such leaves are
//!    fewer than half of those with cross-leaf directions.
//!
//! What a finding does: its failed cross-leaf directions are blamed on
//! it ([`super::verdict::Blame::Switch`]), are left out of the node rule
//! (a node under it passes when its other pairs do) and out of the slow
//! rounds, and a named leaf fails the run (exit 3) though its nodes
//! pass. A note changes no verdict.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::schedule::Rank;
use super::verdict::{Measurement, Outcome, Reason, gbps};
use crate::proto::wire::printable;

/// Fewest failed cross-leaf directions that name a leaf: one pair both
/// ways (two) is a link, never a switch.
pub const MIN_SWITCH_FAILED: usize = 4;
/// Fewest of a leaf's nodes its failed cross-leaf directions must
/// involve: one node's failures are that node's.
pub const MIN_SWITCH_NODES: usize = 2;
/// Longest switch or group name shown (characters; the rest elided).
pub const MAX_SWITCH_NAME: usize = 128;

/// Where each rank's rails sit: plain data, built from a topology (a
/// Slurm `topology.conf`, an `ibnetdiscover` output, the ranks'
/// `SLURM_TOPOLOGY_ADDR`). Every index is checked when read: an index
/// out of range is "unknown", never a panic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafLayout {
    /// The switches' names; `leaf_of` indexes them.
    pub switch_names: Vec<String>,
    /// Per rank, per rail, the leaf switch its port on that rail sits
    /// under (`leaf_of[rank][rail]`); absent or `None`: unknown. On a
    /// classic fat tree every rail of a node names the node's leaf; on a
    /// rail-optimised fabric rail k names rail k's leaf.
    pub leaf_of: Vec<Vec<Option<u32>>>,
    /// The groups' names (nodes under the same leaves); `group_of`
    /// indexes them.
    pub group_names: Vec<String>,
    /// Per rank, its group (absent or out of range: no group, drawn
    /// last).
    pub group_of: Vec<u32>,
}

impl LeafLayout {
    /// The leaf rank `rank`'s port on `rail` sits under, when known.
    pub fn leaf(&self, rank: Rank, rail: u32) -> Option<u32> {
        self.leaf_of
            .get(rank as usize)?
            .get(rail as usize)
            .copied()
            .flatten()
            .filter(|&s| (s as usize) < self.switch_names.len())
    }

    /// Switch `s`'s name, printable (`switch N` when out of range).
    pub fn switch_name(&self, s: u32) -> String {
        self.switch_names
            .get(s as usize)
            .map_or_else(|| format!("switch {s}"), |n| printable(n, MAX_SWITCH_NAME))
    }

    /// Rank `rank`'s group, when known.
    pub fn group(&self, rank: Rank) -> Option<u32> {
        self.group_of
            .get(rank as usize)
            .copied()
            .filter(|&g| (g as usize) < self.group_names.len())
    }

    /// Group `g`'s name, printable (`unknown` when out of range).
    pub fn group_name(&self, g: Option<u32>) -> String {
        g.and_then(|g| self.group_names.get(g as usize))
            .map_or_else(|| "unknown".into(), |n| printable(n, MAX_SWITCH_NAME))
    }

    /// The ranks `0..size` in the order a page draws them: by group (in
    /// `group_names`' order, ranks without one last), then by host
    /// (`host(rank)`, digits compared as numbers: `node-9` before
    /// `node-10`), then by rank.
    pub fn order(&self, size: u32, host: impl Fn(Rank) -> String) -> Vec<Rank> {
        let mut keyed: Vec<(u32, String, Rank)> = (0..size)
            .map(|r| (self.group(r).unwrap_or(u32::MAX), host(r), r))
            .collect();
        keyed.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| natural_cmp(&a.1, &b.1))
                .then(a.2.cmp(&b.2))
        });
        keyed.into_iter().map(|(_, _, r)| r).collect()
    }
}

/// `a` against `b` with runs of digits compared as numbers.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (&a[..da], &b[..db]);
                // Leading zeros aside, a longer run is a larger number.
                let strip = |n: &[u8]| -> usize { n.iter().take_while(|&&c| c == b'0').count() };
                let (ta, tb) = (&na[strip(na)..], &nb[strip(nb)..]);
                let o = ta.len().cmp(&tb.len()).then(ta.cmp(tb)).then(da.cmp(&db));
                if o != Ordering::Equal {
                    return o;
                }
                (a, b) = (&a[da..], &b[db..]);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                (a, b) = (&a[1..], &b[1..]);
            }
        }
    }
}

/// What a switch finding says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SwitchKind {
    /// One leaf's uplinks: its cross-leaf directions failed, its nodes
    /// passed among themselves.
    Uplinks,
    /// Two leaves that met only each other: the uplinks between them.
    UplinksBetween,
    /// A leaf whose cross-leaf directions failed but within which no
    /// pair was measured: a note, no verdict changed.
    Unresolved,
}

/// A leaf switch named by the verdicts, on one rail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SwitchFinding {
    /// What it says.
    pub kind: SwitchKind,
    /// The leaf's index in [`LeafLayout::switch_names`].
    #[serde(skip)]
    pub switch: u32,
    /// The leaf's name, printable.
    pub name: String,
    /// With [`SwitchKind::UplinksBetween`], the other leaf's index.
    #[serde(skip)]
    pub peer: Option<u32>,
    /// With [`SwitchKind::UplinksBetween`], the other leaf's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_name: Option<String>,
    /// The rail.
    pub rail: u32,
    /// Ranks under it on that rail (both leaves' with two).
    pub nodes: usize,
    /// Its cross-leaf directions measured (with two leaves: those between
    /// them).
    pub cross_measured: usize,
    /// Of those, failed.
    pub cross_failed: usize,
    /// Its intra-leaf directions measured (with two leaves: both's).
    pub intra_measured: usize,
    /// Of those, failed.
    pub intra_failed: usize,
    /// Its slowest cross-leaf direction, Gb/s.
    pub worst_bw_gbps: Option<f64>,
    /// The finding for a person (the stdout line without its word).
    pub message: String,
}

impl SwitchFinding {
    /// Whether it fails the run (a note does not).
    pub fn fails(&self) -> bool {
        self.kind != SwitchKind::Unresolved
    }

    /// Its word: `SWITCH`, or `NOTE` for a leaf that cannot be told from
    /// its nodes.
    pub fn word(&self) -> &'static str {
        if self.fails() { "SWITCH" } else { "NOTE" }
    }

    /// What it names: `leaf L`, or `the uplinks between L and M`.
    pub fn what(&self) -> String {
        match &self.peer_name {
            Some(p) => format!("the uplinks between {} and {p}", self.name),
            None => format!("leaf {}", self.name),
        }
    }

    /// Its message, from its figures and `why`, the reasons its worst
    /// direction failed (`40.00 Gb/s < 0.93 × best 100.00 Gb/s`).
    fn compose(&mut self, why: Option<String>) {
        let worst = match (why, self.worst_bw_gbps) {
            (Some(w), _) => format!(", worst: {w}"),
            (None, Some(b)) => format!(", worst {} Gb/s", gbps(b)),
            (None, None) => String::new(),
        };
        let intra_passed = self.intra_measured - self.intra_failed;
        self.message = match self.kind {
            SwitchKind::Uplinks => format!(
                "leaf {}, rail {}: {} of {} cross-leaf directions failed{worst}; \
                 its nodes pass within the leaf ({intra_passed} of {} directions passed): \
                 suspect its uplinks",
                self.name, self.rail, self.cross_failed, self.cross_measured, self.intra_measured
            ),
            SwitchKind::UplinksBetween => format!(
                "{}, rail {}: {} of {} directions between the two leaves failed{worst}; \
                 their nodes pass within each leaf ({intra_passed} of {} directions passed): \
                 suspect the uplinks between them (with two leaves, one cannot be told from the other)",
                self.what(),
                self.rail,
                self.cross_failed,
                self.cross_measured,
                self.intra_measured
            ),
            SwitchKind::Unresolved => format!(
                "leaf {}, rail {}: {} of {} cross-leaf directions failed{worst}; \
                 no pair within the leaf was measured: its uplinks cannot be told from its nodes, \
                 which are judged as usual",
                self.name, self.rail, self.cross_failed, self.cross_measured
            ),
        };
    }
}

/// One leaf's figures on one rail (every leaf with a measured
/// direction, finding or not: `metrics.prom`'s per-switch series).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeafTally {
    /// The leaf's index in [`LeafLayout::switch_names`].
    pub switch: u32,
    /// Its name, printable.
    pub name: String,
    /// The rail.
    pub rail: u32,
    /// Ranks under it on that rail.
    pub nodes: usize,
    /// Cross-leaf directions measured.
    pub cross_measured: usize,
    /// Of those, failed.
    pub cross_failed: usize,
    /// Intra-leaf directions measured.
    pub intra_measured: usize,
    /// Of those, failed.
    pub intra_failed: usize,
    /// Its slowest cross-leaf direction, Gb/s.
    pub worst_cross_bw_gbps: Option<f64>,
    /// The finding that names it, an index into
    /// [`super::verdict::ClusterVerdict::switches`].
    pub finding: Option<u32>,
}

/// One rail's localisation.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Localised {
    /// Every leaf with a measured direction, in switch order.
    pub leaves: Vec<LeafTally>,
    /// The findings, named ones first (in the order named), then notes.
    pub findings: Vec<SwitchFinding>,
    /// Per direction (the rail's measurements' order), the named finding
    /// that explains its failure.
    pub explained: Vec<Option<u32>>,
}

/// One leaf's working tallies.
#[derive(Debug, Clone, Default)]
struct Work {
    nodes: usize,
    intra_m: usize,
    intra_f: usize,
    cross_m: usize,
    cross_f: usize,
    /// Cross-leaf directions not explained by a leaf named so far.
    live_m: usize,
    live_f: usize,
    /// Slowest cross-leaf direction (an error is -inf).
    worst: Option<f64>,
    /// Per other leaf: directions with it, measured and failed.
    peers: BTreeMap<u32, (usize, usize)>,
    /// Its failed cross-leaf directions: its own node, the other leaf.
    failed_with: Vec<(Rank, u32)>,
    /// Not to be considered again (it failed the two-leaf check).
    skipped: bool,
}

impl Work {
    fn passes_within(&self) -> bool {
        self.intra_m > 0 && self.intra_f * 2 < self.intra_m
    }

    /// Its distinct nodes with a failed direction to a leaf `to` allows.
    fn involved(&self, to: impl Fn(u32) -> bool) -> usize {
        let mut nodes: Vec<Rank> = self
            .failed_with
            .iter()
            .filter(|(_, p)| to(*p))
            .map(|(n, _)| *n)
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes.len()
    }
}

/// Rail `rail`'s localisation: `measurements` are all on that rail,
/// `reasons` the rules each failed (same index). Ranks `0..size`.
pub(crate) fn localise(
    layout: &LeafLayout,
    size: u32,
    rail: u32,
    measurements: &[&Measurement],
    reasons: &[Vec<Reason>],
) -> Localised {
    let leaves = layout.switch_names.len();
    let mut work: Vec<Work> = vec![Work::default(); leaves];
    for r in 0..size {
        if let Some(l) = layout.leaf(r, rail) {
            work[l as usize].nodes += 1;
        }
    }
    let ends = |m: &Measurement| Some((layout.leaf(m.from, rail)?, layout.leaf(m.to, rail)?));
    let key = |m: &Measurement| match m.outcome {
        Outcome::Measured { bw_gbps, .. } => Some(bw_gbps),
        Outcome::Error { .. } => Some(f64::NEG_INFINITY),
        Outcome::PeerMissing => None,
    };
    let mut touched = vec![false; leaves];
    for (m, why) in measurements.iter().zip(reasons) {
        let (Some((a, b)), Some(k)) = (ends(m), key(m)) else {
            continue;
        };
        let failed = !why.is_empty();
        touched[a as usize] = true;
        touched[b as usize] = true;
        if a == b {
            let w = &mut work[a as usize];
            w.intra_m += 1;
            w.intra_f += usize::from(failed);
            continue;
        }
        for (own, other, node) in [(a, b, m.from), (b, a, m.to)] {
            let w = &mut work[own as usize];
            w.cross_m += 1;
            w.cross_f += usize::from(failed);
            w.worst = Some(w.worst.map_or(k, |x: f64| x.min(k)));
            let p = w.peers.entry(other).or_default();
            p.0 += 1;
            p.1 += usize::from(failed);
            if failed {
                w.failed_with.push((node, other));
            }
        }
    }
    for w in &mut work {
        (w.live_m, w.live_f) = (w.cross_m, w.cross_f);
    }

    // Rules 1-3: name the worst suspect leaf, explain its directions,
    // judge the others on the rest.
    let mut named: Vec<Option<u32>> = vec![None; leaves];
    let mut findings: Vec<SwitchFinding> = Vec::new();
    loop {
        let mut candidates: Vec<u32> = (0..leaves as u32)
            .filter(|&l| {
                let w = &work[l as usize];
                named[l as usize].is_none()
                    && !w.skipped
                    && w.passes_within()
                    && w.live_f >= MIN_SWITCH_FAILED
                    && w.live_f * 2 > w.live_m
            })
            .collect();
        // Worst first: the highest share failed (compared exactly, as
        // f/m against f'/m'), then the most failed, then the index.
        candidates.sort_by(|&x, &y| {
            let (a, b) = (&work[x as usize], &work[y as usize]);
            (b.live_f * a.live_m)
                .cmp(&(a.live_f * b.live_m))
                .then(b.live_f.cmp(&a.live_f))
                .then(x.cmp(&y))
        });
        let is_live = |named: &[Option<u32>], p: u32| named[p as usize].is_none();
        let Some(l) = candidates
            .into_iter()
            .find(|&l| work[l as usize].involved(|p| is_live(&named, p)) >= MIN_SWITCH_NODES)
        else {
            break;
        };
        let live_peers: Vec<u32> = work[l as usize]
            .peers
            .keys()
            .copied()
            .filter(|&p| is_live(&named, p))
            .collect();
        let index = findings.len() as u32;
        let wl = &work[l as usize];
        let finding = if let [m] = live_peers[..] {
            let wm = &work[m as usize];
            if !(wm.passes_within() && wm.involved(|p| p == l) >= MIN_SWITCH_NODES) {
                work[l as usize].skipped = true;
                continue;
            }
            let (between_m, between_f) = wl.peers[&m];
            named[m as usize] = Some(index);
            SwitchFinding {
                kind: SwitchKind::UplinksBetween,
                switch: l,
                name: layout.switch_name(l),
                peer: Some(m),
                peer_name: Some(layout.switch_name(m)),
                rail,
                nodes: wl.nodes + wm.nodes,
                cross_measured: between_m,
                cross_failed: between_f,
                intra_measured: wl.intra_m + wm.intra_m,
                intra_failed: wl.intra_f + wm.intra_f,
                worst_bw_gbps: None,
                message: String::new(),
            }
        } else {
            SwitchFinding {
                kind: SwitchKind::Uplinks,
                switch: l,
                name: layout.switch_name(l),
                peer: None,
                peer_name: None,
                rail,
                nodes: wl.nodes,
                cross_measured: wl.cross_m,
                cross_failed: wl.cross_f,
                intra_measured: wl.intra_m,
                intra_failed: wl.intra_f,
                worst_bw_gbps: None,
                message: String::new(),
            }
        };
        named[l as usize] = Some(index);
        // Their directions with the leaves not named are explained.
        let newly: Vec<u32> = [Some(l), finding.peer].into_iter().flatten().collect();
        for &x in &newly {
            let peers: Vec<(u32, (usize, usize))> = work[x as usize]
                .peers
                .iter()
                .map(|(&p, &c)| (p, c))
                .collect();
            for (p, (pm, pf)) in peers {
                if named[p as usize].is_none() {
                    let w = &mut work[p as usize];
                    w.live_m -= pm;
                    w.live_f -= pf;
                }
            }
        }
        findings.push(finding);
    }

    // Rule 4: a reference, unless the finding is the rail's only two
    // leaves.
    let cross_leaves = work.iter().filter(|w| w.cross_m > 0).count();
    let only_pair = findings.len() == 1 && findings[0].peer.is_some() && cross_leaves == 2;
    if !findings.is_empty() && !only_pair {
        let (mut m, mut f) = (0, 0);
        for (a, w) in work.iter().enumerate() {
            if named[a].is_some() {
                continue;
            }
            for (&p, &(pm, pf)) in w.peers.range(a as u32 + 1..) {
                if named[p as usize].is_none() {
                    m += pm;
                    f += pf;
                }
            }
        }
        if m == 0 || f * 2 >= m {
            findings.clear();
            named.iter_mut().for_each(|n| *n = None);
            for w in &mut work {
                (w.live_m, w.live_f) = (w.cross_m, w.cross_f);
            }
        }
    }

    // Rule 5: notes on leaves that cannot be told from their nodes.
    let notes: Vec<u32> = (0..leaves as u32)
        .filter(|&l| {
            let w = &work[l as usize];
            named[l as usize].is_none()
                && w.intra_m == 0
                && w.live_f >= MIN_SWITCH_FAILED
                && w.live_f * 2 > w.live_m
        })
        .collect();
    let named_count = findings.len();
    if notes.len() * 2 < cross_leaves {
        for l in notes {
            let w = &work[l as usize];
            named[l as usize] = Some(findings.len() as u32);
            findings.push(SwitchFinding {
                kind: SwitchKind::Unresolved,
                switch: l,
                name: layout.switch_name(l),
                peer: None,
                peer_name: None,
                rail,
                nodes: w.nodes,
                cross_measured: w.cross_m,
                cross_failed: w.cross_f,
                intra_measured: 0,
                intra_failed: 0,
                worst_bw_gbps: None,
                message: String::new(),
            });
        }
    }

    // Each cross-leaf direction: the findings it belongs to (their
    // worst), and the named one that explains its failure (the one named
    // first, when both its leaves are).
    let mut explained = vec![None; measurements.len()];
    let mut worst: Vec<Option<(f64, usize)>> = vec![None; findings.len()];
    if !findings.is_empty() {
        for (i, (m, why)) in measurements.iter().zip(reasons).enumerate() {
            let (Some((a, b)), Some(k)) = (ends(m), key(m)) else {
                continue;
            };
            if a == b {
                continue;
            }
            let (fa, fb) = (named[a as usize], named[b as usize]);
            for f in [fa, fb.filter(|&x| Some(x) != fa)].into_iter().flatten() {
                // With two leaves, only the directions between them.
                let between_ok = findings[f as usize]
                    .peer
                    .is_none_or(|_| fa.is_some() && fa == fb);
                if between_ok && worst[f as usize].is_none_or(|(w, _)| k < w) {
                    worst[f as usize] = Some((k, i));
                }
            }
            if !why.is_empty() {
                let first = [fa, fb]
                    .into_iter()
                    .flatten()
                    .filter(|&f| (f as usize) < named_count)
                    .min();
                explained[i] = first;
            }
        }
    }
    for (f, w) in findings.iter_mut().zip(&worst) {
        f.worst_bw_gbps = w.map(|(k, _)| k).filter(|k| k.is_finite());
        let why = w.and_then(|(_, i)| {
            let lines: Vec<String> = reasons[i].iter().map(Reason::line).collect();
            (!lines.is_empty()).then(|| lines.join("; "))
        });
        f.compose(why);
    }

    let leaves = work
        .iter()
        .enumerate()
        .filter(|(l, _)| touched[*l])
        .map(|(l, w)| LeafTally {
            switch: l as u32,
            name: layout.switch_name(l as u32),
            rail,
            nodes: w.nodes,
            cross_measured: w.cross_m,
            cross_failed: w.cross_f,
            intra_measured: w.intra_m,
            intra_failed: w.intra_f,
            worst_cross_bw_gbps: w.worst.filter(|k| k.is_finite()),
            finding: named[l],
        })
        .collect();
    Localised {
        leaves,
        findings,
        explained,
    }
}

/// Fabricated fabrics and runs for the tests (here, the report's and the
/// page's).
#[cfg(test)]
pub(crate) mod fabricate {
    use super::*;

    /// A fat tree: `groups[i]` ranks under leaf i (`leaf{i}`, its group
    /// `g{i}`), ranks numbered in order, each of `rails` rails under the
    /// node's leaf.
    pub(crate) fn fat_tree(groups: &[usize], rails: usize) -> LeafLayout {
        let mut layout = LeafLayout {
            switch_names: (0..groups.len()).map(|i| format!("leaf{i}")).collect(),
            group_names: (0..groups.len()).map(|i| format!("g{i}")).collect(),
            ..LeafLayout::default()
        };
        for (i, &n) in groups.iter().enumerate() {
            for _ in 0..n {
                layout.leaf_of.push(vec![Some(i as u32); rails]);
                layout.group_of.push(i as u32);
            }
        }
        layout
    }

    /// Each group's ranks, in order.
    pub(crate) fn members(groups: &[usize]) -> Vec<Vec<Rank>> {
        let mut next = 0;
        groups
            .iter()
            .map(|&n| {
                let m: Vec<Rank> = (next..next + n as Rank).collect();
                next += n as Rank;
                m
            })
            .collect()
    }

    /// A `leaves`-like schedule: round 0 pairs the ranks within each
    /// group; then the circle method over the groups (at most
    /// `max_cross` of its rounds), the ranks of two groups met one to
    /// one (the smaller group's count).
    pub(crate) fn leaves_rounds(members: &[Vec<Rank>], max_cross: usize) -> Vec<Vec<(Rank, Rank)>> {
        let intra = members
            .iter()
            .flat_map(|m| m.chunks_exact(2).map(|p| (p[0], p[1])))
            .collect();
        let mut rounds = vec![intra];
        let g = members.len() + members.len() % 2;
        for k in 0..(g - 1).min(max_cross) {
            let mut pairs = Vec::new();
            let mut meet = |a: usize, b: usize| {
                if let (Some(x), Some(y)) = (members.get(a), members.get(b)) {
                    pairs.extend(x.iter().zip(y).map(|(&p, &q)| (p, q)));
                }
            };
            meet(g - 1, k);
            for i in 1..g / 2 {
                meet((k + i) % (g - 1), (k + g - 1 - i) % (g - 1));
            }
            rounds.push(pairs);
        }
        rounds
    }

    /// All pairs of `size` ranks by the circle method.
    pub(crate) fn all_pairs_rounds(size: u32) -> Vec<Vec<(Rank, Rank)>> {
        crate::cluster::schedule::all_pairs(size)
            .unwrap()
            .rounds
            .iter()
            .map(|r| r.pairs.iter().map(|p| (p.client, p.server)).collect())
            .collect()
    }

    /// Both directions of every pair of every round on each of `rails`
    /// rails, at `bw(round, rail, from, to)` Gb/s.
    pub(crate) fn measure(
        rounds: &[Vec<(Rank, Rank)>],
        rails: u32,
        bw: impl Fn(u32, u32, Rank, Rank) -> f64,
    ) -> Vec<Measurement> {
        let mut out = Vec::new();
        for (round, pairs) in rounds.iter().enumerate() {
            for rail in 0..rails {
                for &(a, b) in pairs {
                    for (from, to) in [(a, b), (b, a)] {
                        out.push(Measurement {
                            round: round as u32,
                            from,
                            to,
                            rail,
                            outcome: Outcome::Measured {
                                bw_gbps: bw(round as u32, rail, from, to),
                                msg_rate_mpps: None,
                                lat_us: None,
                                latency: None,
                            },
                        });
                    }
                }
            }
        }
        out
    }

    /// `slow` Gb/s for a direction whose ranks sit under different leaves
    /// on `rail` with one of them `leaf`, else 100.
    pub(crate) fn slow_uplinks(
        layout: &LeafLayout,
        leaf: u32,
        on_rail: u32,
        slow: f64,
    ) -> impl Fn(u32, u32, Rank, Rank) -> f64 + '_ {
        move |_, rail, from, to| {
            let (a, b) = (layout.leaf(from, rail), layout.leaf(to, rail));
            if rail == on_rail && a != b && (a == Some(leaf) || b == Some(leaf)) {
                slow
            } else {
                100.0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fabricate::*;
    use super::*;
    use crate::cluster::verdict::{
        Blame, ClusterVerdict, NodeStatus, Thresholds, judge, judge_with_layout,
    };

    fn judged(size: u32, ms: &[Measurement], layout: &LeafLayout) -> ClusterVerdict {
        judge_with_layout(size, &[], ms, &Thresholds::default(), &[], Some(layout))
    }

    fn statuses(v: &ClusterVerdict) -> Vec<NodeStatus> {
        v.nodes.iter().map(|n| n.status).collect()
    }

    /// Four leaves of four ranks, the `leaves`-like schedule (one intra
    /// round, three cross rounds).
    fn four_by_four() -> (LeafLayout, Vec<Vec<(Rank, Rank)>>) {
        let groups = [4, 4, 4, 4];
        (fat_tree(&groups, 1), leaves_rounds(&members(&groups), 99))
    }

    #[test]
    fn a_slow_uplink_names_its_leaf_and_its_nodes_pass() {
        let (layout, rounds) = four_by_four();
        let ms = measure(&rounds, 1, slow_uplinks(&layout, 2, 0, 40.0));
        // Without a topology, the leaf's four nodes fail: 3 of 4 pairs.
        let blind = judge(16, &[], &ms, &Thresholds::default());
        assert_eq!(
            blind
                .nodes
                .iter()
                .filter(|n| n.status == NodeStatus::Fail)
                .map(|n| n.rank)
                .collect::<Vec<_>>(),
            [8, 9, 10, 11]
        );
        let v = judged(16, &ms, &layout);
        assert_eq!(statuses(&v), [NodeStatus::Pass; 16]);
        assert_eq!(v.switches.len(), 1, "{:#?}", v.switches);
        let f = &v.switches[0];
        assert_eq!(
            (f.kind, f.name.as_str(), f.rail, f.nodes),
            (SwitchKind::Uplinks, "leaf2", 0, 4)
        );
        assert_eq!(
            (
                f.cross_measured,
                f.cross_failed,
                f.intra_measured,
                f.intra_failed
            ),
            (24, 24, 4, 0)
        );
        assert_eq!(f.worst_bw_gbps, Some(40.0));
        assert_eq!(
            f.message,
            "leaf leaf2, rail 0: 24 of 24 cross-leaf directions failed, worst: \
             40.00 Gb/s < 0.93 × best 100.00 Gb/s; its nodes pass within the leaf \
             (4 of 4 directions passed): suspect its uplinks"
        );
        // The run fails (exit 3) though every node passes.
        assert!(!v.pass());
        assert_eq!(v.exit_code(), 3);
        for (m, d) in ms.iter().zip(&v.directions) {
            let crossing = (layout.leaf(m.from, 0) == Some(2)) != (layout.leaf(m.to, 0) == Some(2));
            assert_eq!(d.pass, !crossing, "{m:?}");
            if crossing {
                assert_eq!((d.blame, d.switch_finding()), (Blame::Switch, Some(0)));
                assert!(d.blamed_ranks.is_empty());
            } else {
                assert_eq!(d.blame, Blame::None);
            }
        }
        // Its nodes: 3 of 4 pairs failed, all across it; the others met
        // it once.
        assert_eq!(
            (
                v.nodes[8].pairs,
                v.nodes[8].failed,
                v.nodes[8].switch_failed
            ),
            (4, 3, 3)
        );
        assert_eq!((v.nodes[0].failed, v.nodes[0].switch_failed), (1, 1));
        assert!(v.rounds.iter().all(|r| !r.slow));
        // Every leaf's figures, for metrics.prom.
        assert_eq!(v.leaves.len(), 4);
        assert_eq!(v.leaves[2].finding, Some(0));
        assert_eq!(
            (v.leaves[0].cross_measured, v.leaves[0].cross_failed),
            (24, 8)
        );
    }

    #[test]
    fn a_slow_node_stays_a_node_finding() {
        let (layout, rounds) = four_by_four();
        let ms = measure(
            &rounds,
            1,
            |_, _, from, to| {
                if from == 5 || to == 5 { 40.0 } else { 100.0 }
            },
        );
        let v = judged(16, &ms, &layout);
        assert!(v.switches.is_empty(), "{:#?}", v.switches);
        let mut want = [NodeStatus::Pass; 16];
        want[5] = NodeStatus::Fail;
        assert_eq!(statuses(&v), want);
        assert!(
            v.directions
                .iter()
                .all(|d| d.pass || (d.blame == Blame::Node && d.blamed_ranks == [5]))
        );
    }

    #[test]
    fn one_slow_pair_stays_a_link() {
        let (layout, rounds) = four_by_four();
        // Ranks 0 and 4 meet in a cross round.
        assert!(
            rounds[1..]
                .iter()
                .flatten()
                .any(|&p| p == (0, 4) || p == (4, 0))
        );
        let ms = measure(&rounds, 1, |_, _, from, to| {
            if (from.min(to), from.max(to)) == (0, 4) {
                40.0
            } else {
                100.0
            }
        });
        let v = judged(16, &ms, &layout);
        assert!(v.switches.is_empty());
        assert_eq!(v.nodes[0].status, NodeStatus::LinkFailures);
        assert_eq!(v.nodes[4].status, NodeStatus::LinkFailures);
        assert!(
            v.directions
                .iter()
                .all(|d| d.pass || d.blame == Blame::Link)
        );
    }

    #[test]
    fn a_slow_spine_wide_round_stays_a_slow_round() {
        let (layout, rounds) = four_by_four();
        let ms = measure(
            &rounds,
            1,
            |round, _, _, _| {
                if round == 2 { 60.0 } else { 100.0 }
            },
        );
        let v = judged(16, &ms, &layout);
        assert!(v.switches.is_empty(), "{:#?}", v.switches);
        assert!(v.pass());
        assert_eq!(
            v.rounds
                .iter()
                .filter(|r| r.slow)
                .map(|r| r.round)
                .collect::<Vec<_>>(),
            [2]
        );
        // The whole spine slow, every cross round: no reference, no leaf
        // named; the cross rounds are slow rounds.
        let ms = measure(
            &rounds,
            1,
            |round, _, _, _| {
                if round > 0 { 60.0 } else { 100.0 }
            },
        );
        let v = judged(16, &ms, &layout);
        assert!(v.switches.is_empty(), "{:#?}", v.switches);
        assert_eq!(v.rounds.iter().filter(|r| r.slow).count(), 3);
        assert!(v.pass());
    }

    #[test]
    fn two_leaves_name_the_uplinks_between_them_once() {
        for per_leaf in [2, 4] {
            let groups = [per_leaf, per_leaf];
            let layout = fat_tree(&groups, 1);
            let rounds = leaves_rounds(&members(&groups), 99);
            assert_eq!(rounds.len(), 2);
            let ms = measure(&rounds, 1, slow_uplinks(&layout, 0, 0, 30.0));
            let n = 2 * per_leaf as u32;
            let v = judged(n, &ms, &layout);
            assert_eq!(v.switches.len(), 1, "{:#?}", v.switches);
            let f = &v.switches[0];
            assert_eq!(f.kind, SwitchKind::UplinksBetween);
            assert_eq!(f.what(), "the uplinks between leaf0 and leaf1");
            assert_eq!(
                (f.cross_measured, f.cross_failed, f.intra_measured, f.nodes),
                (2 * per_leaf, 2 * per_leaf, 2 * per_leaf, 2 * per_leaf)
            );
            assert!(f.message.starts_with(&format!(
                "the uplinks between leaf0 and leaf1, rail 0: {0} of {0} directions between the two leaves failed",
                2 * per_leaf
            )), "{}", f.message);
            assert!(v.nodes.iter().all(|n| n.status == NodeStatus::Pass));
            assert_eq!(v.exit_code(), 3);
            // Both leaves point at the one finding.
            assert_eq!(
                v.leaves.iter().map(|l| l.finding).collect::<Vec<_>>(),
                [Some(0), Some(0)]
            );
            assert!(v.rounds.iter().all(|r| !r.slow));
        }
    }

    #[test]
    fn all_pairs_with_a_topology_names_the_leaf_too() {
        let groups = [4, 4, 4];
        let layout = fat_tree(&groups, 1);
        let ms = measure(&all_pairs_rounds(12), 1, slow_uplinks(&layout, 1, 0, 50.0));
        let v = judged(12, &ms, &layout);
        assert_eq!(v.switches.len(), 1, "{:#?}", v.switches);
        assert_eq!(
            (v.switches[0].name.as_str(), v.switches[0].kind),
            ("leaf1", SwitchKind::Uplinks)
        );
        // 4 nodes × 8 partners in other leaves × 2 directions.
        assert_eq!(
            (v.switches[0].cross_measured, v.switches[0].intra_measured),
            (64, 12)
        );
        assert_eq!(statuses(&v), [NodeStatus::Pass; 12]);
    }

    #[test]
    fn two_slow_leaves_of_four_are_both_named_and_the_others_not() {
        let (layout, rounds) = four_by_four();
        let ms = measure(&rounds, 1, |_, _, from, to| {
            let (a, b) = (layout.leaf(from, 0).unwrap(), layout.leaf(to, 0).unwrap());
            if a != b && (a <= 1 || b <= 1) {
                40.0
            } else {
                100.0
            }
        });
        let v = judged(16, &ms, &layout);
        let mut names: Vec<&str> = v.switches.iter().map(|f| f.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["leaf0", "leaf1"], "{:#?}", v.switches);
        assert!(v.switches.iter().all(|f| f.kind == SwitchKind::Uplinks));
        assert_eq!(statuses(&v), [NodeStatus::Pass; 16]);
    }

    #[test]
    fn a_rail_optimised_fabric_names_the_leaf_on_its_own_rail_only() {
        // Four scalable units of four nodes, two rails: rail k of each
        // unit's nodes under the unit's leaf k (`su{u}-rail{k}`).
        let mut layout = LeafLayout::default();
        for u in 0..4 {
            for k in 0..2 {
                layout.switch_names.push(format!("su{u}-rail{k}"));
            }
            layout.group_names.push(format!("su{u}"));
        }
        for r in 0..16u32 {
            let u = r / 4;
            layout.leaf_of.push(vec![Some(u * 2), Some(u * 2 + 1)]);
            layout.group_of.push(u);
        }
        let rounds = leaves_rounds(&members(&[4, 4, 4, 4]), 99);
        // su2's rail-1 leaf (index 5) has slow uplinks; its rail 0 not.
        let ms = measure(&rounds, 2, slow_uplinks(&layout, 5, 1, 20.0));
        let v = judged(16, &ms, &layout);
        assert_eq!(v.switches.len(), 1, "{:#?}", v.switches);
        assert_eq!(
            (v.switches[0].name.as_str(), v.switches[0].rail),
            ("su2-rail1", 1)
        );
        assert!(
            v.switches[0]
                .message
                .starts_with("leaf su2-rail1, rail 1: 24 of 24")
        );
        assert_eq!(statuses(&v), [NodeStatus::Pass; 16]);
        assert!(
            v.nodes
                .iter()
                .all(|n| n.rails.iter().all(|r| r.status == NodeStatus::Pass))
        );
        assert_eq!(v.nodes[9].rails[1].switch_failed, 3);
        // Rail 0's directions all passed; rail 1's crossing su2's leaf
        // are the finding's.
        for (m, d) in ms.iter().zip(&v.directions) {
            assert_eq!(d.blame == Blame::Switch, !d.pass, "{m:?}");
            if !d.pass {
                assert_eq!((m.rail, d.switch_finding()), (1, Some(0)));
            }
        }
        assert_eq!(v.leaves.len(), 8);
    }

    #[test]
    fn a_leaf_with_no_pair_inside_cannot_be_told_from_its_node_a_note() {
        // Leaf 3 holds one rank (12), slow both ways: no intra evidence.
        let groups = [4, 4, 4, 1];
        let layout = fat_tree(&groups, 1);
        let ms = measure(&all_pairs_rounds(13), 1, slow_uplinks(&layout, 3, 0, 40.0));
        let v = judged(13, &ms, &layout);
        assert_eq!(v.switches.len(), 1, "{:#?}", v.switches);
        let f = &v.switches[0];
        assert_eq!((f.kind, f.name.as_str()), (SwitchKind::Unresolved, "leaf3"));
        assert!(!f.fails());
        assert!(f.message.ends_with(
            "no pair within the leaf was measured: its uplinks cannot be told from its nodes, \
             which are judged as usual"
        ));
        // Its node is judged as without a topology.
        let blind = judge(13, &[], &ms, &Thresholds::default());
        assert_eq!(statuses(&v), statuses(&blind));
        assert_eq!(v.nodes[12].status, NodeStatus::Fail);
        assert!(v.directions.iter().all(|d| d.blame != Blame::Switch));
    }

    #[test]
    fn without_a_layout_or_with_unknown_leaves_the_verdicts_are_unchanged() {
        let (layout, rounds) = four_by_four();
        let ms = measure(&rounds, 1, slow_uplinks(&layout, 2, 0, 40.0));
        let blind = judge(16, &[], &ms, &Thresholds::default());
        let none = judge_with_layout(16, &[], &ms, &Thresholds::default(), &[], None);
        assert_eq!(blind, none);
        // Leaves out of range, or no leaf: no evidence.
        let unknown = LeafLayout {
            switch_names: vec!["x".into()],
            leaf_of: vec![vec![Some(7)]; 16],
            ..LeafLayout::default()
        };
        let v = judged(16, &ms, &unknown);
        assert_eq!(v.nodes, blind.nodes);
        assert!(v.switches.is_empty() && v.leaves.is_empty());
    }

    #[test]
    fn the_page_order_is_by_group_then_host_with_digits_as_numbers() {
        assert_eq!(natural_cmp("node-9", "node-10"), Ordering::Less);
        assert_eq!(natural_cmp("node-010", "node-10"), Ordering::Greater);
        assert_eq!(natural_cmp("a2b3", "a2b03"), Ordering::Less);
        assert_eq!(natural_cmp("a", "ab"), Ordering::Less);
        let layout = LeafLayout {
            group_names: vec!["g0".into(), "g1".into()],
            group_of: vec![1, 0, 1, 0, 9],
            ..LeafLayout::default()
        };
        let hosts = ["n10", "n2", "n9", "n1", "n0"];
        assert_eq!(
            layout.order(5, |r| hosts[r as usize].into()),
            [3, 1, 2, 0, 4]
        );
        assert_eq!(layout.group_name(layout.group(4)), "unknown");
    }

    /// The scale: 16,384 ranks in leaves of 32 on one rail, one
    /// intra round and four cross rounds; leaf 7's uplinks slow. Timed
    /// (`cargo test --release -p rdmaperf-engine at_16384 -- --nocapture`
    /// prints the figures; no time asserted).
    #[test]
    fn at_16384_ranks_one_slow_leaf_is_named_and_none_of_its_nodes_failed() {
        let groups = vec![32; 512];
        let layout = fat_tree(&groups, 1);
        let rounds = leaves_rounds(&members(&groups), 4);
        let ms = measure(&rounds, 1, slow_uplinks(&layout, 7, 0, 45.0));
        assert_eq!(ms.len(), 5 * 16_384);
        let started = std::time::Instant::now();
        let v = judged(16_384, &ms, &layout);
        let took = started.elapsed();
        let blind_started = std::time::Instant::now();
        let blind = judge(16_384, &[], &ms, &Thresholds::default());
        let blind_took = blind_started.elapsed();
        eprintln!(
            "16,384 ranks, {} directions: judged with the layout in {took:?}, without in {blind_took:?}",
            ms.len()
        );
        assert_eq!(v.switches.len(), 1, "{:#?}", v.switches);
        let f = &v.switches[0];
        assert_eq!((f.name.as_str(), f.kind), ("leaf7", SwitchKind::Uplinks));
        // 32 nodes × 4 cross rounds × 2 directions; 16 intra pairs × 2.
        assert_eq!(
            (
                f.cross_measured,
                f.cross_failed,
                f.intra_measured,
                f.intra_failed
            ),
            (256, 256, 32, 0)
        );
        assert!(v.nodes.iter().all(|n| n.status == NodeStatus::Pass));
        // Without the layout, leaf 7's 32 nodes fail.
        assert_eq!(
            blind
                .nodes
                .iter()
                .filter(|n| n.status == NodeStatus::Fail)
                .count(),
            32
        );
    }
}
