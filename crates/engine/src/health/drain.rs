//! `--slurm-drain`: what to do with this node in Slurm after a verdict.
//! Slurm itself acts on no health check; the program drains the node
//! (`scontrol update NodeName=N State=DRAIN Reason=...`). The rule is
//! LBNL NHC's (mej/nhc, helpers/node-mark-offline and node-mark-online):
//! drain on FAIL with a reason that starts with [`REASON_PREFIX`], resume
//! on PASS only a node drained with such a reason — a reason an operator
//! wrote is never cleared, and nothing is done on UNKNOWN (a check that
//! could not finish drains no healthy node: aznhc's NHCNA lesson).

use super::{REASON_PREFIX, Status};

/// The node's drain state as `scontrol show node` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeDrain {
    /// `State=` has `DRAIN` (`IDLE+DRAIN`, `DRAINED`, `DRAINING`,
    /// `MIXED+DRAIN`).
    pub drained: bool,
    /// `State=` as shown.
    pub state: String,
    /// `Reason=` without Slurm's ` [user@time]` tail, when there is one.
    pub reason: Option<String>,
}

impl NodeDrain {
    /// Whether the drain is ours (its reason starts with `rdmaperf:`).
    pub fn is_ours(&self) -> bool {
        self.reason
            .as_deref()
            .is_some_and(|r| r.starts_with(REASON_PREFIX))
    }
}

/// Reads `scontrol show node NAME`'s output (one node, `Key=Value` pairs;
/// `Reason=` runs to the end of its line and ends with ` [user@time]`).
/// `None` when it has no `State=`.
pub fn parse_show_node(text: &str) -> Option<NodeDrain> {
    let mut state = None;
    let mut reason = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(r) = line.strip_prefix("Reason=") {
            let r = match r.rfind(" [") {
                Some(i) if r.ends_with(']') => &r[..i],
                _ => r,
            };
            reason = Some(r.trim().to_owned()).filter(|r| !r.is_empty() && r != "(null)");
            continue;
        }
        for field in line.split_whitespace() {
            if let Some(s) = field.strip_prefix("State=") {
                state = Some(s.to_owned());
            }
        }
    }
    let state = state?;
    Some(NodeDrain {
        drained: state.to_ascii_uppercase().contains("DRAIN"),
        state,
        reason,
    })
}

/// What `--slurm-drain` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainAction {
    /// `scontrol update NodeName=N State=DRAIN Reason=<reason>` (also to
    /// renew our own reason when it changed).
    Drain {
        /// The reason, `rdmaperf: <check>: <message>`.
        reason: String,
    },
    /// `scontrol update NodeName=N State=RESUME`.
    Resume,
    /// Nothing, and why.
    Nothing {
        /// Why, for the report.
        why: String,
    },
}

/// Decides what to do with the node after a `verdict` with `reason`
/// (the verdict's one line), the node's drain state being `node`.
pub fn decide(verdict: Status, reason: Option<&str>, node: &NodeDrain) -> DrainAction {
    match verdict {
        Status::Fail => {
            let reason = reason.unwrap_or("rdmaperf: FAIL").to_owned();
            if !node.drained {
                DrainAction::Drain { reason }
            } else if !node.is_ours() {
                DrainAction::Nothing {
                    why: format!(
                        "already drained with another reason ({:?}): left as the operator set it",
                        node.reason.as_deref().unwrap_or("")
                    ),
                }
            } else if node.reason.as_deref() != Some(reason.as_str()) {
                DrainAction::Drain { reason }
            } else {
                DrainAction::Nothing {
                    why: "already drained by rdmaperf for this reason".into(),
                }
            }
        }
        Status::Pass | Status::Warn => {
            if node.drained && node.is_ours() {
                DrainAction::Resume
            } else if node.drained {
                DrainAction::Nothing {
                    why: format!(
                        "drained with another reason ({:?}): only rdmaperf's own drains are resumed",
                        node.reason.as_deref().unwrap_or("")
                    ),
                }
            } else {
                DrainAction::Nothing {
                    why: "not drained".into(),
                }
            }
        }
        Status::Unknown => DrainAction::Nothing {
            why: "the verdict is UNKNOWN: the node is left as it is".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The shape of Slurm 22.05's `scontrol show node` (Debian's slurm-wlm).
    const SHOWN: &str = "NodeName=virtme-ng Arch=x86_64 CoresPerSocket=1
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.50
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug
   Reason=rdmaperf: port: rxe1/1 state DOWN, not ACTIVE [root@2026-12-05T08:30:01]
";

    fn node(drained: bool, reason: Option<&str>) -> NodeDrain {
        NodeDrain {
            drained,
            state: if drained { "IDLE+DRAIN" } else { "IDLE" }.into(),
            reason: reason.map(str::to_owned),
        }
    }

    #[test]
    fn scontrols_node_is_read_with_the_reason_without_its_tail() {
        let n = parse_show_node(SHOWN).unwrap();
        assert!(n.drained);
        assert_eq!(n.state, "IDLE+DRAIN");
        assert_eq!(
            n.reason.as_deref(),
            Some("rdmaperf: port: rxe1/1 state DOWN, not ACTIVE")
        );
        assert!(n.is_ours());
        let idle = parse_show_node("NodeName=n1\n   State=IDLE ThreadsPerCore=1\n").unwrap();
        assert!(!idle.drained && idle.reason.is_none());
        assert!(parse_show_node("Node n1 not found").is_none());
    }

    #[test]
    fn fail_drains_an_undrained_node_and_never_overwrites_an_operators_reason() {
        let ours = "rdmaperf: flap: rxe1/1 5 link flaps";
        assert_eq!(
            decide(Status::Fail, Some(ours), &node(false, None)),
            DrainAction::Drain {
                reason: ours.into()
            }
        );
        assert!(matches!(
            decide(
                Status::Fail,
                Some(ours),
                &node(true, Some("operator: cable swap"))
            ),
            DrainAction::Nothing { .. }
        ));
        // Our own, older reason is renewed; the same one is left.
        assert!(matches!(
            decide(
                Status::Fail,
                Some(ours),
                &node(true, Some("rdmaperf: port: old"))
            ),
            DrainAction::Drain { .. }
        ));
        assert!(matches!(
            decide(Status::Fail, Some(ours), &node(true, Some(ours))),
            DrainAction::Nothing { .. }
        ));
    }

    #[test]
    fn pass_resumes_only_our_drain_and_unknown_never_acts() {
        for pass in [Status::Pass, Status::Warn] {
            assert_eq!(
                decide(pass, None, &node(true, Some("rdmaperf: port: x"))),
                DrainAction::Resume
            );
            assert!(matches!(
                decide(pass, None, &node(true, Some("NHC: something else"))),
                DrainAction::Nothing { .. }
            ));
            // "rdmaperf" without the colon is not ours.
            assert!(matches!(
                decide(pass, None, &node(true, Some("rdmaperf maintenance"))),
                DrainAction::Nothing { .. }
            ));
            assert!(matches!(
                decide(pass, None, &node(false, None)),
                DrainAction::Nothing { .. }
            ));
        }
        for n in [node(false, None), node(true, Some("rdmaperf: x"))] {
            assert!(matches!(
                decide(Status::Unknown, Some("rdmaperf: unknown: x"), &n),
                DrainAction::Nothing { .. }
            ));
        }
    }
}
