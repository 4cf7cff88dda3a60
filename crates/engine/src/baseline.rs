//! Each link against its own past: a direction's (or a rail's) bandwidth
//! judged against the median of its own earlier passing runs, not a fixed
//! floor nor the fleet. No public node check does this (aznhc holds every
//! H100 NDR link to one 380 Gb/s floor, SuperBench compares with a
//! fleet/SKU baseline), so a link that slowly loses 15 % while staying
//! above the floor is never caught; this catches it.
//!
//! The rule ([`History::judge`], decided; docs/health.md says why):
//! - a figure is judged only once there are [`BaselineRule::runs`] (K)
//!   passing runs: before that the baseline is *building*;
//! - the *recent* baseline is the median of the last K passing runs: a
//!   figure below `drop` × it is [`BaselineJudgement::Below`] (a sudden
//!   drop);
//! - the *reference* is the median of the first K passing runs since the
//!   history began or was reset ([`History::reset`]); a figure below
//!   `drop` × it is `Below` too — the recent median follows a slow drift
//!   down (each run a little slower still passes), the reference does not;
//! - the median (of an even count, the mean of the middle two) keeps one
//!   outlier run from moving either; a run that was not passing (its own
//!   verdict failed, or it was below its baseline) never enters them.
//!
//! The history is bounded: the last [`MAX_RUNS`] runs and K reference runs.

use serde::{Deserialize, Serialize};

/// Most runs a history keeps (oldest dropped).
pub const MAX_RUNS: usize = 32;

/// The rule's two numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BaselineRule {
    /// A figure below this fraction of its baseline is below it (0.9).
    pub drop: f64,
    /// How many passing runs a baseline is the median of, and needs (5).
    pub runs: usize,
}

impl Default for BaselineRule {
    fn default() -> Self {
        Self { drop: 0.9, runs: 5 }
    }
}

/// One run of a link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// When, Unix seconds.
    pub time_s: i64,
    /// Its figure, Gb/s.
    pub gbps: f64,
    /// Whether it passed (its own verdict and its baseline).
    pub pass: bool,
}

/// What a baseline was the median of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Against {
    /// The last K passing runs.
    Recent,
    /// The first K passing runs since the history began or was reset.
    Reference,
}

/// A figure against its past.
#[derive(Debug, Clone, PartialEq)]
pub enum BaselineJudgement {
    /// Fewer than K passing runs: no verdict yet.
    Building {
        /// Passing runs kept.
        have: usize,
        /// Passing runs needed.
        need: usize,
    },
    /// At or above `drop` × its baselines.
    Within {
        /// The figure over the recent baseline.
        ratio: f64,
        /// The recent baseline, Gb/s.
        baseline_gbps: f64,
        /// How many runs it is the median of.
        runs: usize,
    },
    /// Below `drop` × a baseline.
    Below {
        /// The figure, Gb/s.
        figure: f64,
        /// The baseline it fell below, Gb/s.
        baseline_gbps: f64,
        /// The figure over it.
        ratio: f64,
        /// The runs the baseline is the median of.
        runs: Vec<Run>,
        /// Which baseline.
        against: Against,
        /// The rule's `drop`.
        drop: f64,
    },
}

impl BaselineJudgement {
    /// For a figure below its baseline: `rxe1/1 -> rxe0/1: 2.10 Gb/s is
    /// below 0.9 x 9.80 Gb/s, the median of its last 5 passing runs
    /// (2026-12-05 08:00 to 09:10 UTC)`; `None` otherwise.
    pub fn line(&self, what: &str) -> Option<String> {
        let Self::Below {
            figure,
            baseline_gbps,
            runs,
            against,
            drop,
            ..
        } = self
        else {
            return None;
        };
        let (first, last) = (runs.first()?, runs.last()?);
        let whose = match against {
            Against::Recent => format!(
                "the median of its last {} passing runs ({} to {} UTC)",
                runs.len(),
                utc_minute(first.time_s),
                utc_minute(last.time_s)
            ),
            Against::Reference => format!(
                "the median of its first {} passing runs (its reference, from {} UTC)",
                runs.len(),
                utc_minute(first.time_s)
            ),
        };
        Some(format!(
            "{what}: {figure:.2} Gb/s is below {drop} x {baseline_gbps:.2} Gb/s, {whose}"
        ))
    }
}

/// A link's past runs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct History {
    /// The last runs, oldest first, at most [`MAX_RUNS`].
    pub recent: Vec<Run>,
    /// The first K passing runs since the history began or was reset.
    pub reference: Vec<Run>,
}

/// The median of some figures (not empty).
fn median(runs: &[Run]) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(|r| r.gbps).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl History {
    /// Judges `gbps` against this history under `rule`.
    pub fn judge(&self, gbps: f64, rule: &BaselineRule) -> BaselineJudgement {
        let k = rule.runs.max(1);
        let passing: Vec<&Run> = self.recent.iter().filter(|r| r.pass).collect();
        if passing.len() < k {
            return BaselineJudgement::Building {
                have: passing.len(),
                need: k,
            };
        }
        let last: Vec<Run> = passing[passing.len() - k..]
            .iter()
            .map(|r| (*r).clone())
            .collect();
        let recent = median(&last);
        let below = |base: f64| gbps.is_finite() && base > 0.0 && gbps < rule.drop * base;
        if below(recent) {
            return BaselineJudgement::Below {
                figure: gbps,
                baseline_gbps: recent,
                ratio: gbps / recent,
                runs: last,
                against: Against::Recent,
                drop: rule.drop,
            };
        }
        if self.reference.len() >= k {
            let reference = median(&self.reference[..k]);
            if below(reference) {
                return BaselineJudgement::Below {
                    figure: gbps,
                    baseline_gbps: reference,
                    ratio: gbps / reference,
                    runs: self.reference[..k].to_vec(),
                    against: Against::Reference,
                    drop: rule.drop,
                };
            }
        }
        BaselineJudgement::Within {
            ratio: gbps / recent,
            baseline_gbps: recent,
            runs: k,
        }
    }

    /// Adds a run (judged before, with [`History::judge`]): kept among the
    /// last [`MAX_RUNS`]; a passing one also joins the reference while it
    /// has fewer than `rule.runs`. A figure that is not a finite,
    /// non-negative number is never passing.
    pub fn record(&mut self, run: Run, rule: &BaselineRule) {
        let mut run = run;
        if !(run.gbps.is_finite() && run.gbps >= 0.0) {
            run.pass = false;
        }
        if run.pass && self.reference.len() < rule.runs.max(1) {
            self.reference.push(run.clone());
        }
        self.recent.push(run);
        if self.recent.len() > MAX_RUNS {
            let extra = self.recent.len() - MAX_RUNS;
            self.recent.drain(..extra);
        }
    }

    /// Forgets everything (a deliberate change: new NICs, cables, firmware).
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// `2026-12-05 08:00` of Unix seconds (UTC; days to a civil date by
/// Howard Hinnant's `civil_from_days`).
pub fn utc_minute(time_s: i64) -> String {
    let days = time_s.div_euclid(86_400);
    let secs = time_s.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        secs / 3_600,
        (secs % 3_600) / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_796_428_800; // 2026-12-05 00:00 UTC

    fn history(figures: &[f64], rule: &BaselineRule) -> History {
        let mut h = History::default();
        for (i, &g) in figures.iter().enumerate() {
            let pass = !matches!(h.judge(g, rule), BaselineJudgement::Below { .. });
            h.record(
                Run {
                    time_s: T0 + 300 * i as i64,
                    gbps: g,
                    pass,
                },
                rule,
            );
        }
        h
    }

    #[test]
    fn too_few_runs_build_and_judge_nothing() {
        let rule = BaselineRule::default();
        let h = history(&[10.0, 10.0, 10.0, 10.0], &rule);
        assert_eq!(
            h.judge(1.0, &rule),
            BaselineJudgement::Building { have: 4, need: 5 }
        );
    }

    #[test]
    fn a_sudden_drop_is_below_the_recent_median_and_the_line_names_the_runs() {
        let rule = BaselineRule::default();
        let h = history(&[9.6, 9.8, 10.0, 9.9, 9.7], &rule);
        let j = h.judge(8.0, &rule);
        let BaselineJudgement::Below {
            baseline_gbps,
            against,
            runs,
            ..
        } = &j
        else {
            panic!("{j:?}")
        };
        assert_eq!(
            (*baseline_gbps, *against, runs.len()),
            (9.8, Against::Recent, 5)
        );
        assert_eq!(
            j.line("rxe1/1 -> rxe0/1").unwrap(),
            "rxe1/1 -> rxe0/1: 8.00 Gb/s is below 0.9 x 9.80 Gb/s, the median of its last 5 \
             passing runs (2026-12-05 00:00 to 2026-12-05 00:20 UTC)"
        );
        assert!(matches!(
            h.judge(9.0, &rule),
            BaselineJudgement::Within { .. }
        ));
    }

    #[test]
    fn a_slow_drift_passes_the_recent_median_and_fails_the_reference() {
        let rule = BaselineRule::default();
        // 2 % slower every run: each run is within 0.9 of the last five.
        let figures: Vec<f64> = (0..8).map(|i| 10.0 * 0.98f64.powi(i)).collect();
        let h = history(&figures, &rule);
        assert!(h.recent.iter().all(|r| r.pass), "{h:?}");
        // The ninth, 8.51 Gb/s: 0.94 of the last five's median (9.04), 0.886
        // of the first five's (9.60).
        let next = 10.0 * 0.98f64.powi(8);
        let j = h.judge(next, &rule);
        assert!(
            matches!(
                j,
                BaselineJudgement::Below {
                    against: Against::Reference,
                    ..
                }
            ),
            "{j:?}"
        );
        assert!(j.line("mlx5_0/1 -> mlx5_1/1").unwrap().contains(
            "the median of its first 5 passing runs (its reference, from 2026-12-05 00:00 UTC)"
        ));
    }

    #[test]
    fn one_outlier_does_not_move_the_median_and_a_failed_run_never_counts() {
        let rule = BaselineRule::default();
        let h = history(&[10.0, 10.0, 40.0, 10.0, 10.0], &rule);
        assert!(matches!(
            h.judge(9.5, &rule),
            BaselineJudgement::Within { baseline_gbps, .. } if baseline_gbps == 10.0
        ));
        let mut g = History::default();
        for i in 0..6 {
            g.record(
                Run {
                    time_s: i,
                    gbps: 1.0,
                    pass: false,
                },
                &rule,
            );
        }
        assert_eq!(
            g.judge(1.0, &rule),
            BaselineJudgement::Building { have: 0, need: 5 }
        );
        assert!(g.reference.is_empty());
        // Even count: the mean of the middle two.
        let e = history(&[1.0, 2.0, 3.0, 4.0], &BaselineRule { drop: 0.9, runs: 4 });
        assert!(matches!(
            e.judge(2.5, &BaselineRule { drop: 0.9, runs: 4 }),
            BaselineJudgement::Within { baseline_gbps, .. } if baseline_gbps == 2.5
        ));
    }

    #[test]
    fn the_history_is_bounded_and_round_trips() {
        let rule = BaselineRule::default();
        let figures = vec![10.0; 100];
        let mut h = history(&figures, &rule);
        assert_eq!(h.recent.len(), MAX_RUNS);
        assert_eq!(h.reference.len(), 5);
        assert_eq!(h.reference[0].time_s, T0);
        h.record(
            Run {
                time_s: 0,
                gbps: f64::NAN,
                pass: true,
            },
            &rule,
        );
        assert!(!h.recent.last().unwrap().pass);
        let text = serde_json::to_string(&h).unwrap();
        let back: History = serde_json::from_str(&text.replace("NaN", "null")).unwrap_or_default();
        assert!(back.recent.len() <= MAX_RUNS);
        h.reset();
        assert_eq!(h, History::default());
        assert_eq!(utc_minute(0), "1970-01-01 00:00");
        assert_eq!(utc_minute(T0 + 9 * 3_600 + 10 * 60), "2026-12-05 09:10");
    }
}
