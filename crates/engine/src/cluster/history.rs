//! `rdmaperf cluster --history DIR`: every direction of a cluster run
//! against its own past runs (`crate::baseline`'s rule, as `rdmaperf
//! health --active` judges a node's rails). A direction is named by its two
//! ends — each a host and the rail's device and port,
//! `node7:mlx5_3:1 -> node9:mlx5_3:1` — not by ranks, which change from run
//! to run; when several ranks of one run share a host and device
//! (simulations), the rank is added.
//!
//! The file (`cluster-history.json`) is bounded: at most [`MAX_KEYS`]
//! directions (the ones whose last run is oldest go first) and
//! `2 × --baseline-runs` runs each; a file over [`MAX_HISTORY_BYTES`], not
//! JSON of this shape, or of another format or version is refused and the
//! binary sets it aside.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::schedule::Rank;
use super::verdict::{BaselineFloor, DirectionVerdict, Measurement};
use crate::baseline::{BaselineJudgement, BaselineRule, History, Run};

/// The file's `format` field.
pub const HISTORY_FORMAT: &str = "rdmaperf-cluster-history";
/// The file's `version` field.
pub const HISTORY_VERSION: u32 = 1;
/// Most directions kept: all pairs of 90 nodes on 8 rails, or a ring of
/// 4,096 nodes on 8 rails; about 40 MB of JSON at 10 runs each.
pub const MAX_KEYS: usize = 65_536;
/// Largest history file read, bytes.
pub const MAX_HISTORY_BYTES: u64 = 64 << 20;

/// The history file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterHistory {
    /// [`HISTORY_FORMAT`].
    pub format: String,
    /// [`HISTORY_VERSION`].
    pub version: u32,
    /// Each direction's runs, by `from -> to`.
    pub directions: BTreeMap<String, History>,
}

impl Default for ClusterHistory {
    fn default() -> Self {
        Self {
            format: HISTORY_FORMAT.into(),
            version: HISTORY_VERSION,
            directions: BTreeMap::new(),
        }
    }
}

/// What the history made of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistoryTally {
    /// Directions measured and named.
    pub measured: usize,
    /// Of those, below their baseline.
    pub below: usize,
    /// Of those, whose baseline is still building.
    pub building: usize,
    /// Directions dropped to stay within [`MAX_KEYS`].
    pub dropped: usize,
}

impl HistoryTally {
    /// `history: 24 directions against their own past: 2 below, 0 still
    /// building`.
    pub fn line(&self) -> String {
        let mut line = format!(
            "history: {} directions against their own past: {} below, {} still building",
            self.measured, self.below, self.building
        );
        if self.dropped > 0 {
            line.push_str(&format!(
                "; {} older directions forgotten (at most {MAX_KEYS} are kept)",
                self.dropped
            ));
        }
        line
    }
}

/// Each rank's rail ends: `ends[rank][rail]`, e.g. `node7:mlx5_3:1`.
#[derive(Debug, Clone, Copy)]
pub struct Ends<'a> {
    ends: &'a [Vec<String>],
}

impl<'a> Ends<'a> {
    /// `ends[rank][rail]`; a rank with one end uses it on every rail.
    pub fn new(ends: &'a [Vec<String>]) -> Self {
        Self { ends }
    }

    fn end(&self, rank: Rank, rail: u32) -> Option<&str> {
        let of_rank = self.ends.get(rank as usize)?;
        of_rank
            .get(rail as usize)
            .or_else(|| (of_rank.len() == 1).then(|| &of_rank[0]))
            .map(String::as_str)
    }

    /// The key of a measurement's direction, when both ends are known.
    pub fn key(&self, m: &Measurement) -> Option<String> {
        let rail = m.judged_rail();
        Some(format!(
            "{} -> {}",
            self.end(m.from, rail)?,
            self.end(m.to, rail)?
        ))
    }
}

/// Each rank's ends from its host and its rails' devices (`devices[rank]`:
/// one per rail, or one for all), the rank added where host and device
/// are not unique in the run.
pub fn ends_of(hosts: &[Option<String>], devices: &[Vec<String>]) -> Vec<Vec<String>> {
    let raw: Vec<Vec<String>> = hosts
        .iter()
        .zip(devices)
        .map(|(h, ds)| match h {
            Some(h) => ds.iter().map(|d| format!("{h}:{d}")).collect(),
            None => Vec::new(),
        })
        .collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for e in raw.iter().flatten() {
        *seen.entry(e.as_str()).or_default() += 1;
    }
    raw.iter()
        .enumerate()
        .map(|(rank, ends)| {
            ends.iter()
                .map(|e| {
                    if seen.get(e.as_str()).copied().unwrap_or(0) > 1 {
                        format!("{e}#{rank}")
                    } else {
                        e.clone()
                    }
                })
                .collect()
        })
        .collect()
}

impl ClusterHistory {
    /// Reads a history file's bytes.
    ///
    /// # Errors
    /// Why it is not one (too big, damaged, another format or version).
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() as u64 > MAX_HISTORY_BYTES {
            return Err(format!(
                "{} bytes, more than the {MAX_HISTORY_BYTES} a history can be",
                bytes.len()
            ));
        }
        #[derive(Deserialize)]
        struct Header {
            format: String,
            version: u32,
        }
        let header: Header = serde_json::from_slice(bytes).map_err(|e| format!("damaged: {e}"))?;
        if header.format != HISTORY_FORMAT || header.version != HISTORY_VERSION {
            return Err(format!(
                "not an rdmaperf cluster history of version {HISTORY_VERSION} (format {:?}, \
                 version {})",
                header.format, header.version
            ));
        }
        serde_json::from_slice(bytes).map_err(|e| format!("damaged: {e}"))
    }

    /// Each measurement's baseline (`None`: unnamed, not measured, or
    /// still building), and the tally.
    pub fn floors(
        &self,
        ends: &Ends<'_>,
        measurements: &[Measurement],
        rule: &BaselineRule,
    ) -> (Vec<Option<BaselineFloor>>, HistoryTally) {
        let mut tally = HistoryTally::default();
        let floors = measurements
            .iter()
            .map(|m| {
                let bw = m.bw()?;
                let key = ends.key(m)?;
                tally.measured += 1;
                let Some(h) = self.directions.get(&key) else {
                    tally.building += 1;
                    return None;
                };
                match h.judge(bw, rule) {
                    BaselineJudgement::Building { .. } => {
                        tally.building += 1;
                        None
                    }
                    BaselineJudgement::Within {
                        baseline_gbps,
                        runs,
                        ..
                    } => Some(BaselineFloor {
                        baseline_gbps,
                        drop: rule.drop,
                        runs,
                        against: crate::baseline::Against::Recent,
                    }),
                    BaselineJudgement::Below {
                        baseline_gbps,
                        runs,
                        against,
                        ..
                    } => {
                        tally.below += 1;
                        Some(BaselineFloor {
                            baseline_gbps,
                            drop: rule.drop,
                            runs: runs.len(),
                            against,
                        })
                    }
                }
            })
            .collect();
        (floors, tally)
    }

    /// Records every measured direction with its verdict (`directions[i]`
    /// for `measurements[i]`) at `now_s`, keeping `2 × rule.runs` runs a
    /// direction and at most [`MAX_KEYS`] directions; how many were
    /// dropped.
    pub fn record(
        &mut self,
        ends: &Ends<'_>,
        measurements: &[Measurement],
        directions: &[DirectionVerdict],
        rule: &BaselineRule,
        now_s: i64,
    ) -> usize {
        let keep = (2 * rule.runs).clamp(1, crate::baseline::MAX_RUNS);
        for (m, d) in measurements.iter().zip(directions) {
            let (Some(bw), Some(key)) = (m.bw(), ends.key(m)) else {
                continue;
            };
            let h = self.directions.entry(key).or_default();
            h.record(
                Run {
                    time_s: now_s,
                    gbps: bw,
                    pass: d.pass,
                },
                rule,
            );
            if h.recent.len() > keep {
                let extra = h.recent.len() - keep;
                h.recent.drain(..extra);
            }
        }
        let over = self.directions.len().saturating_sub(MAX_KEYS);
        if over > 0 {
            let mut by_age: Vec<(i64, String)> = self
                .directions
                .iter()
                .map(|(k, h)| (h.recent.last().map_or(i64::MIN, |r| r.time_s), k.clone()))
                .collect();
            by_age.sort();
            for (_, k) in by_age.into_iter().take(over) {
                self.directions.remove(&k);
            }
        }
        over
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::verdict::Outcome;

    fn measured(from: Rank, to: Rank, rail: u32, bw: f64) -> Measurement {
        Measurement {
            round: 0,
            from,
            to,
            rail,
            outcome: Outcome::Measured {
                bw_gbps: bw,
                lat_us: None,
                msg_rate_mpps: None,
                latency: None,
            },
        }
    }

    fn pass() -> DirectionVerdict {
        DirectionVerdict {
            pass: true,
            ..DirectionVerdict::default()
        }
    }

    #[test]
    fn ends_are_host_and_device_and_the_rank_only_where_they_repeat() {
        let hosts = vec![
            Some("n1".to_owned()),
            Some("n2".to_owned()),
            Some("n2".to_owned()),
            None,
        ];
        let devices = vec![
            vec!["mlx5_0".to_owned(), "mlx5_1".to_owned()],
            vec!["mlx5_0".to_owned()],
            vec!["mlx5_0".to_owned()],
            vec!["x".to_owned()],
        ];
        let ends = ends_of(&hosts, &devices);
        assert_eq!(ends[0], ["n1:mlx5_0", "n1:mlx5_1"]);
        assert_eq!(ends[1], ["n2:mlx5_0#1"]);
        assert_eq!(ends[2], ["n2:mlx5_0#2"]);
        assert!(ends[3].is_empty());
        let e = Ends::new(&ends);
        assert_eq!(
            e.key(&measured(0, 1, 1, 1.0)).as_deref(),
            Some("n1:mlx5_1 -> n2:mlx5_0#1")
        );
        assert_eq!(e.key(&measured(0, 3, 0, 1.0)), None);
    }

    #[test]
    fn a_direction_builds_its_baseline_then_falls_below_it() {
        let rule = BaselineRule { drop: 0.9, runs: 3 };
        let ends = vec![vec!["a:d".to_owned()], vec!["b:d".to_owned()]];
        let e = Ends::new(&ends);
        let mut h = ClusterHistory::default();
        for i in 0..3 {
            let ms = [measured(0, 1, 0, 10.0), measured(1, 0, 0, 10.0)];
            let (floors, tally) = h.floors(&e, &ms, &rule);
            assert_eq!(floors, [None, None]);
            assert_eq!((tally.measured, tally.building, tally.below), (2, 2, 0));
            h.record(&e, &ms, &[pass(), pass()], &rule, i);
        }
        let ms = [measured(0, 1, 0, 5.0), measured(1, 0, 0, 10.0)];
        let (floors, tally) = h.floors(&e, &ms, &rule);
        assert_eq!((tally.below, tally.building), (1, 0));
        assert_eq!(floors[0].unwrap().baseline_gbps, 10.0);
        assert_eq!(
            tally.line(),
            "history: 2 directions against their own past: 1 below, 0 still building"
        );
        // Kept runs are bounded at 2 K.
        for i in 0..20 {
            h.record(&e, &ms, &[pass(), pass()], &rule, 10 + i);
        }
        assert_eq!(h.directions["a:d -> b:d"].recent.len(), 6);
        let text = serde_json::to_vec(&h).unwrap();
        assert_eq!(ClusterHistory::parse(&text).unwrap(), h);
        assert!(ClusterHistory::parse(b"{\"format\":\"x\",\"version\":1}").is_err());
        assert!(
            ClusterHistory::parse(b"{\"format\":")
                .unwrap_err()
                .starts_with("damaged")
        );
    }

    #[test]
    fn the_oldest_directions_go_beyond_the_cap() {
        let rule = BaselineRule::default();
        let mut h = ClusterHistory::default();
        for i in 0..(MAX_KEYS + 10) {
            h.directions.insert(
                format!("k{i:06}"),
                History {
                    recent: vec![Run {
                        time_s: i as i64,
                        gbps: 1.0,
                        pass: true,
                    }],
                    reference: Vec::new(),
                },
            );
        }
        let ends: Vec<Vec<String>> = Vec::new();
        let dropped = h.record(&Ends::new(&ends), &[], &[], &rule, 0);
        assert_eq!(dropped, 10);
        assert_eq!(h.directions.len(), MAX_KEYS);
        assert!(!h.directions.contains_key("k000000"));
        assert!(h.directions.contains_key("k065545"));
    }
}
