//! stub (to be replaced by the helper's module)
#![allow(missing_docs)]
use serde::{Deserialize, Serialize};
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Run {
    pub time_s: i64,
    pub gbps: f64,
    pub pass: bool,
}
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BaselineRule {
    pub drop: f64,
    pub runs: usize,
}
#[derive(Debug, Clone, PartialEq)]
pub enum Against {
    Recent,
    Reference,
}
#[derive(Debug, Clone, PartialEq)]
pub enum BaselineJudgement {
    Building {
        have: usize,
        need: usize,
    },
    Within {
        ratio: f64,
        baseline_gbps: f64,
        runs: usize,
    },
    Below {
        figure: f64,
        baseline_gbps: f64,
        ratio: f64,
        runs: Vec<Run>,
        against: Against,
    },
}
impl BaselineJudgement {
    pub fn line(&self, what: &str) -> Option<String> {
        match self {
            Self::Below {
                figure,
                baseline_gbps,
                runs,
                ..
            } => Some(format!(
                "{what}: {figure:.2} Gb/s is below x {baseline_gbps:.2} Gb/s, the median of its last {} passing runs",
                runs.len()
            )),
            _ => None,
        }
    }
}
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct History {
    pub recent: Vec<Run>,
    pub reference: Vec<Run>,
}
impl History {
    pub fn judge(&self, gbps: f64, rule: &BaselineRule) -> BaselineJudgement {
        let mut p: Vec<Run> = self.recent.iter().filter(|r| r.pass).cloned().collect();
        if p.len() < rule.runs {
            return BaselineJudgement::Building {
                have: p.len(),
                need: rule.runs,
            };
        }
        p = p.split_off(p.len() - rule.runs);
        let mut v: Vec<f64> = p.iter().map(|r| r.gbps).collect();
        v.sort_by(f64::total_cmp);
        let m = v[v.len() / 2];
        if gbps < rule.drop * m {
            BaselineJudgement::Below {
                figure: gbps,
                baseline_gbps: m,
                ratio: gbps / m,
                runs: p,
                against: Against::Recent,
            }
        } else {
            BaselineJudgement::Within {
                ratio: gbps / m,
                baseline_gbps: m,
                runs: rule.runs,
            }
        }
    }
    pub fn record(&mut self, run: Run) {
        self.recent.push(run);
    }
}
